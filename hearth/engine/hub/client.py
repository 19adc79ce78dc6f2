"""The Hub's catalogue through `huggingface_hub`: search GGUF repositories, list a repository's
GGUF files with sizes and LFS SHA-256, and a file's download location.

`huggingface_hub` owns the protocol here (URLs, query parameters, pagination, headers, the Hub's
error codes, the stored login); this module turns its answers into Hearth's small dataclasses and
its exceptions into `HubError`s that say what to do. The endpoint is `HF_ENDPOINT` (read by
`huggingface_hub`) unless one is given.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import urlparse

import httpx2
import huggingface_hub
from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url
from huggingface_hub import errors as hf_errors
from huggingface_hub.utils._http import default_client_factory

# huggingface_hub's requests wait forever by default: a Hub that stops answering would hold a
# search's thread for good. Downloads pass their own timeouts.
REQUEST_TIMEOUT = httpx2.Timeout(30.0, connect=10.0)


def _client_with_timeouts():
    c = default_client_factory()
    c.timeout = REQUEST_TIMEOUT
    return c


huggingface_hub.set_client_factory(_client_with_timeouts)

from ..errors import HubError
from .reach import NO_HUB
from ..library.file_names import ModelFileGroup, group_model_files
from ..library.support import Verdict, verdict_before_download
from .names import path_problem

log = logging.getLogger(__name__)
SEARCH_FIELDS = ["author", "downloads", "likes", "lastModified", "gated", "gguf", "tags"]


@dataclass(frozen=True)
class RepoSummary:
    repo_id: str
    author: str
    downloads: int
    likes: int
    updated: datetime | None
    gated: bool                  # the Hub's "auto"/"manual" both mean: a token with access is needed
    architecture: str | None     # from the Hub's GGUF summary, when it has one
    context_length: int | None
    parameters: int | None


@dataclass(frozen=True)
class HubFile:
    path: str                    # in the repository, folders included
    size: int
    sha256: str | None           # the LFS object id; None for a file kept in git (no SHA-256 known)


@dataclass(frozen=True)
class RemoteModel:
    """One model of a repository: a whole GGUF or all parts of a split one."""
    group: ModelFileGroup
    files: tuple[HubFile, ...]
    verdict: Verdict

    @property
    def name(self) -> str:
        return self.group.name

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True)
class RepoDetails:
    summary: RepoSummary
    commit: str                  # every file of a download comes from this commit
    models: list[RemoteModel] = field(default_factory=list)


def stored_token() -> str | None:
    """The token of `huggingface_hub`'s login (`hf auth login`, or HF_TOKEN), or None."""
    try:
        return huggingface_hub.get_token()
    except Exception:  # noqa: BLE001  (a broken token file must not stop the Models window)
        return None


def _summary(info) -> RepoSummary:
    gguf = info.gguf if isinstance(getattr(info, "gguf", None), dict) else {}
    author = info.author or (info.id.split("/", 1)[0] if "/" in info.id else "")
    return RepoSummary(
        repo_id=info.id, author=author, downloads=int(info.downloads or 0), likes=int(info.likes or 0),
        updated=info.last_modified, gated=bool(info.gated),
        architecture=gguf.get("architecture"), context_length=gguf.get("context_length"),
        parameters=gguf.get("total"))


class HubClient:
    """Talks to one Hub endpoint with one token (or none).

    `token`: a token string; None means the stored login's token (`stored_token()`); "" means none.
    """

    def __init__(self, endpoint: str | None = None, token: str | None = None):
        self.endpoint = (endpoint or huggingface_hub.constants.ENDPOINT).rstrip("/")
        self.token = stored_token() if token is None else (token or None)
        self.api = HfApi(endpoint=self.endpoint, token=self._token_arg)

    @property
    def _token_arg(self) -> str | bool:
        # huggingface_hub reads `None` as "the stored token"; False sends none.
        return self.token or False

    def search(self, query: str, limit: int = 30, sort: str = "downloads") -> list[RepoSummary]:
        """GGUF repositories matching `query`, most downloaded first, at most `limit`."""
        with _hub_errors(f"search for {query!r}", None, self.token):
            found = self.api.list_models(search=query or None, filter="gguf", sort=sort, limit=limit,
                                         expand=SEARCH_FIELDS, token=self._token_arg)
            return [_summary(m) for m in found]

    def repo(self, repo_id: str, revision: str | None = None) -> RepoDetails:
        """The repository's GGUF models (split parts grouped), sizes, SHA-256s and run verdicts."""
        with _hub_errors(f"repository {repo_id}", repo_id, self.token):
            info = self.api.model_info(repo_id, revision=revision, files_metadata=True, token=self._token_arg)
        summary = _summary(info)
        files = {}
        for s in info.siblings or []:
            lfs = s.lfs
            size = s.size if s.size is not None else (lfs.size if lfs else None)
            if size is None:
                raise HubError("bad_response", f"{repo_id}: the Hub gave no size for {s.rfilename}")
            if path_problem(s.rfilename) is not None:  # could be written outside the models folder
                log.warning("%s: %r left out of the listing (%s)", repo_id, s.rfilename, path_problem(s.rfilename))
                continue
            files[s.rfilename] = HubFile(s.rfilename, int(size), lfs.sha256 if lfs else None)
        models = []
        for g in group_model_files(list(files)):
            verdict = verdict_before_download(g.files[0], summary.architecture)
            if not g.complete:
                verdict = Verdict(False, "some parts of this split model are missing from the repository")
            models.append(RemoteModel(g, tuple(files[p] for p in g.files), verdict))
        if not info.sha:
            raise HubError("bad_response", f"{repo_id}: the Hub gave no commit for the repository")
        return RepoDetails(summary, info.sha, models)

    def file_location(self, repo_id: str, path: str, commit: str) -> tuple[str, int | None, bool]:
        """Where the bytes of `path` at `commit` are: (url, size, send_token). The Hub answers the
        resolve URL with a redirect to a signed storage URL on another host, which must get no
        token; a file served by the Hub itself gets it."""
        url = hf_hub_url(repo_id, path, revision=commit, endpoint=self.endpoint)
        with _hub_errors(f"{repo_id}/{path}", repo_id, self.token):
            meta = get_hf_file_metadata(url, token=self._token_arg, endpoint=self.endpoint)
        location = meta.location or url
        return location, meta.size, _origin(location) == _origin(self.endpoint)

    def download_headers(self, send_token: bool) -> dict[str, str]:
        return huggingface_hub.utils.build_hf_headers(token=self._token_arg if send_token else False)


def _origin(url: str) -> tuple[str, str, int | None]:
    u = urlparse(url)
    return u.scheme, (u.hostname or "").lower(), u.port


class _hub_errors:
    """Turns huggingface_hub's and the HTTP client's exceptions into HubErrors that say what to do."""

    def __init__(self, what: str, repo_id: str | None, token: str | None):
        self.what, self.repo_id, self.token = what, repo_id, token

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is None or isinstance(exc, HubError):
            return False
        raise hub_error(exc, self.what, self.repo_id, self.token) from exc


def hub_error(exc: BaseException, what: str, repo_id: str | None, token: str | None) -> HubError:
    if isinstance(exc, hf_errors.GatedRepoError):
        if token:
            return HubError("gated", f"{repo_id} is gated and your Hugging Face token has no access: "
                                     "accept its terms on the model's page, then try again")
        return HubError("gated", f"{repo_id} is gated: accept its terms on the model's page and give "
                                 "Hearth a Hugging Face token (or log in with `hf auth login`)")
    if isinstance(exc, hf_errors.RepositoryNotFoundError):
        hint = "" if token else " (a private repository needs a token)"
        return HubError("not_found", f"{what}: no such repository on the Hub{hint}")
    if isinstance(exc, (hf_errors.RevisionNotFoundError, hf_errors.RemoteEntryNotFoundError)):
        return HubError("not_found", f"{what}: not found on the Hub")
    if isinstance(exc, hf_errors.HfHubHTTPError):
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status == 401:
            return HubError("auth", f"{what}: the Hub refused the token (401): check it")
        return HubError("network", f"{what}: the Hub answered {status or 'an error'}: {str(exc).splitlines()[0]}")
    if isinstance(exc, hf_errors.OfflineModeIsEnabled):
        return HubError("network", f"{what}: huggingface_hub is in offline mode (HF_HUB_OFFLINE)")
    if isinstance(exc, OSError) or type(exc).__module__.startswith(("httpx", "httpcore")):
        return HubError("network", f"{what}: {NO_HUB} ({type(exc).__name__}: {exc})")
    if isinstance(exc, (KeyError, ValueError, TypeError)):
        return HubError("bad_response", f"{what}: the Hub's answer could not be read ({type(exc).__name__}: {exc})")
    return HubError("network", f"{what}: {type(exc).__name__}: {exc}")
