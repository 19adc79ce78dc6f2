"""The Hugging Face Hub as a source of GGUF models: search, a repository's files, downloads.

`client` (catalogue, through huggingface_hub), `download` (resumable, checked downloads),
`partial` (a download in progress on disk). Qt-free; the app drives it from a worker thread.
"""

from .client import HubClient, HubFile, RemoteModel, RepoDetails, RepoSummary, stored_token
from .download import Download, DownloadResult, Outcome, Progress, job_for, model_folder
from .partial import DownloadJob, pending_downloads

__all__ = ["HubClient", "HubFile", "RemoteModel", "RepoDetails", "RepoSummary", "stored_token",
           "Download", "DownloadResult", "Outcome", "Progress", "job_for", "model_folder",
           "DownloadJob", "pending_downloads"]
