"""The Hugging Face Hub as a source of GGUF models: search, a repository's files, downloads.

`client` (catalogue, through huggingface_hub), `remote_header` (a model's facts from its header,
before download), `download` (one resumable, checked download), `downloads` (the running ones, by
key), `partial` (a download in progress on disk). Qt-free; the app drives it from a worker thread.
"""

from .client import HubClient, HubFile, RemoteModel, RepoDetails, RepoSummary, stored_token
from .download import Download, DownloadResult, Outcome, Progress, job_for
from .downloads import DownloadCallbacks, DownloadManager
from .partial import DownloadJob, model_folder, pending_downloads
from .remote_header import remote_facts

__all__ = ["HubClient", "HubFile", "RemoteModel", "RepoDetails", "RepoSummary", "stored_token",
           "Download", "DownloadResult", "Outcome", "Progress", "job_for", "model_folder",
           "DownloadCallbacks", "DownloadManager", "DownloadJob", "pending_downloads", "remote_facts"]
