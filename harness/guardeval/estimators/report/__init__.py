"""The report files and tables of an estimate: report.md, the terminal table, the plots."""
