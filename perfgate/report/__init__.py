"""Reports: the text table, Markdown, the chart, JSON and progress lines."""
