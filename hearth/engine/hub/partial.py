"""A download in progress on disk: `<file>.part` (the bytes so far) and `<file>.part.json` (what
they are), so a download paused, cut off or left by a closed app resumes where it stopped.

Sidecar JSON, version 1:
    {"version": 1, "repo": "owner/name", "commit": "<40 hex>", "name": "<joined file name>",
     "files": [{"path": "<repo path>", "size": <bytes>, "sha256": "<hex>" | null}, ...],
     "path": "<the repo path this .part holds>"}
`files` is the whole model (every part of a split one), so any one sidecar is enough to resume it.
The `.part` file's length is where the download resumes; its bytes are hashed again on resume
(hashlib's state cannot be saved) and the whole file is checked against the SHA-256 at the end.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import HubError
from ..library.json_file import write_json
from .client import HubFile
from .names import check_job_names

SIDECAR_VERSION = 1
PART_SUFFIX = ".part"
SIDECAR_SUFFIX = ".part.json"
MAX_FILE_BYTES = 1 << 50      # a size past this is a damaged or forged sidecar


@dataclass(frozen=True)
class DownloadJob:
    """Everything needed to download one model (again): from a RemoteModel or a sidecar."""
    repo_id: str
    commit: str
    name: str                     # the model's file name once complete (split parts joined)
    files: tuple[HubFile, ...]

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self, path: str) -> dict:
        return {"version": SIDECAR_VERSION, "repo": self.repo_id, "commit": self.commit, "name": self.name,
                "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in self.files],
                "path": path}

    @classmethod
    def from_json(cls, d: dict) -> "DownloadJob":
        if d.get("version") != SIDECAR_VERSION:
            raise ValueError(f"sidecar version {d.get('version')!r}, expected {SIDECAR_VERSION}")
        files = tuple(HubFile(str(f["path"]), int(f["size"]), f.get("sha256")) for f in d["files"])
        job = cls(str(d["repo"]), str(d["commit"]), str(d["name"]), files)
        try:
            check_job_names(job.repo_id, [f.path for f in files], job.name)
        except HubError as e:
            raise ValueError(str(e)) from None
        if any(f.size < 0 or f.size > MAX_FILE_BYTES for f in files):
            raise ValueError(f"a file size out of range (0 to {MAX_FILE_BYTES} bytes)")
        return job


def model_folder(models_dir: Path, repo_id: str) -> Path:
    """`<models>/<owner>/<name>/`: the repository's files keep their paths under it."""
    owner, _, name = repo_id.partition("/")
    return models_dir / owner / (name or owner)


def part_path(final: Path) -> Path:
    return final.with_name(final.name + PART_SUFFIX)


def sidecar_path(final: Path) -> Path:
    return final.with_name(final.name + SIDECAR_SUFFIX)


def write_sidecar(final: Path, job: DownloadJob, repo_path: str) -> None:
    write_json(sidecar_path(final), job.to_json(repo_path))


def read_sidecar(final: Path) -> tuple[DownloadJob, str] | None:
    """The job a `.part` belongs to and the repo path it holds, or None when there is no sidecar or
    it cannot be read (then the partial bytes are of unknown origin and are not resumed)."""
    try:
        d = json.loads(sidecar_path(final).read_text(encoding="utf-8"))
        job, path = DownloadJob.from_json(d), str(d["path"])
    except (OSError, ValueError, KeyError, TypeError, OverflowError, RecursionError):
        return None
    return (job, path) if path in [f.path for f in job.files] else None


def remove_partial(final: Path) -> None:
    part_path(final).unlink(missing_ok=True)
    sidecar_path(final).unlink(missing_ok=True)


def bytes_on_disk(folder: Path, job: DownloadJob) -> int:
    """How much of `job` is on disk under `folder`: whole files done plus the `.part`s so far."""
    done = 0
    for f in job.files:
        final = folder / f.path
        try:
            done += f.size if final.is_file() else min(part_path(final).stat().st_size, f.size)
        except OSError:
            pass
    return done


def pending_downloads(models_dir: Path, max_files: int = 10_000) -> list[tuple[Path, DownloadJob]]:
    """Unfinished downloads under `models_dir`: (the folder the model downloads into, its job),
    one per model."""
    seen, out = set(), []
    for i, sc in enumerate(sorted(models_dir.rglob("*" + SIDECAR_SUFFIX))):
        if i >= max_files:
            break
        final = sc.with_name(sc.name[:-len(SIDECAR_SUFFIX)])
        found = read_sidecar(final)
        if found is None:
            continue
        job, repo_path = found
        key = (job.repo_id, job.commit, job.name)
        if key in seen:
            continue
        seen.add(key)
        folder = final
        for _ in Path(repo_path).parts:  # the repo path's folders sit under the model folder
            folder = folder.parent
        if folder != model_folder(models_dir, job.repo_id):
            continue                     # a sidecar that claims another repository's place
        out.append((folder, job))
    return out
