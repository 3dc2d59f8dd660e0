"""Figures beside their baselines: printed as they come, then written as JSON and Markdown."""
from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from typing import Optional

from bench.jsonfile import write_json


@dataclass
class Figure:
    section: str
    figure: str
    value: float
    unit: str
    baseline: Optional[float] = None
    baseline_label: str = ""  # what the baseline is, in words
    note: str = ""

    @property
    def ratio(self) -> Optional[float]:
        if self.baseline is None or not self.baseline or math.isnan(self.value) or math.isnan(self.baseline):
            return None
        return self.value / self.baseline


def fmt(x: Optional[float]) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    a = abs(x)
    if a >= 1000:
        return f"{x:,.0f}"
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 0.1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def fmt_ratio(r: Optional[float]) -> str:
    if r is None:
        return "–"
    return f"{r:.2f}×" if abs(r) >= 0.1 else f"{r:.2g}×"


class Report:
    def __init__(self, echo=print):
        self.figures: list[Figure] = []
        self.echo = echo
        self._section = None

    def add(self, fig: Figure) -> Figure:
        if fig.section != self._section:
            self._section = fig.section
            self.echo(f"\n## {fig.section}")
            self.echo(f"  {'figure':52s} {'value':>16s} {'baseline':>16s} {'ratio':>8s}")
        base = "" if fig.baseline is None else f"{fmt(fig.baseline)} {fig.unit}"
        self.echo(f"  {fig.figure:52s} {fmt(fig.value) + ' ' + fig.unit:>16s} {base:>16s} "
                  f"{fmt_ratio(fig.ratio):>8s}" + (f"   baseline: {fig.baseline_label}" if fig.baseline_label else ""))
        self.figures.append(fig)
        return fig

    def to_json(self, meta: dict) -> dict:
        return {"meta": meta,
                "figures": [{**asdict(f), "ratio": None if f.ratio is None else round(f.ratio, 4)}
                            for f in self.figures]}

    def to_markdown(self, meta: dict) -> str:
        lines = [f"_{meta.get('headline', '')}_", ""]
        section = None
        for f in self.figures:
            if f.section != section:
                section = f.section
                lines += ["", f"**{section}**", "",
                          "| figure | value | baseline | ratio | baseline is |",
                          "|---|---:|---:|---:|---|"]
            base = "" if f.baseline is None else f"{fmt(f.baseline)} {f.unit}"
            label = f.baseline_label + (f" ({f.note})" if f.note else "")
            lines.append(f"| {f.figure} | {fmt(f.value)} {f.unit} | {base} | {fmt_ratio(f.ratio)} | {label} |")
        return "\n".join(lines).strip() + "\n"

    def write(self, out_dir: str, meta: dict) -> tuple[str, str]:
        os.makedirs(out_dir, exist_ok=True)
        jp, mp = os.path.join(out_dir, "bench.json"), os.path.join(out_dir, "bench.md")
        write_json(jp, self.to_json(meta))
        with open(mp, "w", encoding="utf-8") as f:
            f.write(self.to_markdown(meta))
        return jp, mp
