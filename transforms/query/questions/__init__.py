"""Question files: JSONL, CSV or Parquet, local or s3://, read into Questions or error records.

file.py checks the file as a whole once (inspect_question_file); read.py reads it whole
(read_questions) and pieces.py in byte ranges or row groups over workers; jsonl_lines.py,
csv_rows.py and parquet_rows.py cut lines and rows with bounded memory; validate.py checks each
question's id, acl, filters and shape. No input line is lost: a line that cannot be read is an
error record with its reason.
"""
