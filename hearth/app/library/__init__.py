"""The model library: the Models window, its tabs and downloads, the model picker."""
