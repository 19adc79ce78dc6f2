"""The models on this machine: file names, "can Hearth run this", split models, the local registry,
per-model settings, and whether a model fits in memory. Qt-free."""
