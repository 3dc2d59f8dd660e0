"""The quantities a conflict check compares: values with their units, and years."""

from transforms.query.conflicts import quantities


def test_quantities_reads_values_with_units_and_years():
    assert quantities("It is 12 bar, 3.5 MB and 40% since 1999.") == {
        "bar": {"12"}, "mb": {"3.5"}, "%": {"40"}, "year": {"1999"}}
    assert quantities("Read 3 files and the 2 of them.") == {}
