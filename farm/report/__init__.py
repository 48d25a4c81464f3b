"""The triangle report: every table derived from stored records, printed many ways.

`analysis.analyze(records)` / `analysis.load_report(store, run_ids)` -> `Report`;
`terminal.print_report`, `outputs.format_report(report, "md"|"csv"|"json")`,
`html.write_html(report, path)` print it.
"""
