"""Hearth: a desktop chat app for local language models, with its own inference engine.

`hearth.engine` runs the models (never imports Qt), `hearth.app` is the PySide6 window,
`hearth.resources` holds the shipped presets, tool sets and icons."""
