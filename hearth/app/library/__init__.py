"""The model library: the Models window (its "On this computer" and "Find on the Hub" tabs, the
downloads), the top bar's model picker, a model's size and fit, and its context length dialog.

Owns: `models_ui.ModelsUI` (the window's library part: the Models window made when first opened),
`models_window`, `local_models_tab`, `hub_search_tab`, `hub_tasks` (background Hub work),
`download_panel`, `model_picker.ModelPicker` (which model runs, on what, loading it),
`model_fit`, `context_length`.

Signals: ModelsUI.loadRequested(str), modelsChanged(); ModelPicker.modelChosen(str),
modelReady(dict), actionPicked(str), fileOpened(str), problem(str, str);
ContextLengthDialog.chosen(int); HubTasks.searched, repoOpened, factsRead, failed,
downloadProgress, downloadFinished.

May import: the engine's `library/` and `hub/` (Qt-free), the top-level `chat_source`
(`human_bytes`), `gui_gc`, `elided_label`. Never `chat/`, `presets/` or the window.
"""
