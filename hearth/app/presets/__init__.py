"""Presets: the preset manager, the sampling panel and the prefix cache panel."""
