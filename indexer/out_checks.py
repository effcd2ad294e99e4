"""ngram-build's checks of where it writes, made before any work: --out must
name a file that can be written (not a folder, not empty, its folder
writable), the work folder (--tmp-dir, else OUT.build) a folder that can be
written, and --out none of the files the build reads. Each failure is a
usage error naming the option and what is wrong, instead of an errno text
about a work folder once the build is done."""
from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import click


def is_uri(location: str) -> bool:
    """storage.is_uri, imported when called: storage imports pyarrow, which
    the command's --help should not wait for."""
    from indexer.storage import is_uri as storage_is_uri

    return storage_is_uri(location)


def writable_problem(path: Path) -> str | None:
    """Why a file or folder cannot be made at ``path`` (its nearest existing
    ancestor is a file, or not writable), else None. Folders missing on the
    way are fine: the build makes them."""
    here = path.absolute()
    while not here.exists() and here != here.parent:
        here = here.parent
    if not here.is_dir():
        return f"{here} is a file, not a folder"
    if not os.access(here, os.W_OK | os.X_OK):
        read_only = os.statvfs(here).f_flag & os.ST_RDONLY
        return f"{here} is {'on a read-only file system' if read_only else 'not writable (permission denied)'}"
    return None


def check_out(_ctx: click.Context | None, _param: click.Parameter | None, value: str) -> str:
    """--out's callback: a file name whose folder can be written."""
    if not value.strip():
        raise click.BadParameter("empty: give the trie's file name, e.g. corpus.ngt")
    if is_uri(value):
        if value.endswith("/"):
            raise click.BadParameter(f"{value} ends with '/': give the trie's object name, e.g. {value}corpus.ngt")
        return value
    if value.endswith(("/", os.sep)) or os.path.isdir(value):
        raise click.BadParameter(f"{value} names a folder: give the trie's file name, e.g. "
                                 f"{value.rstrip('/' + os.sep)}/corpus.ngt")
    problem = writable_problem(Path(value).parent)
    if problem:
        raise click.BadParameter(f"cannot write {value}: {problem}")
    return value


def check_work_dir(out: str, tmp_dir: str | None) -> None:
    """The work folder (--tmp-dir, else OUT.build beside --out) must be a
    folder this process can write; the usage error names the option that
    chose it."""
    work = tmp_dir or out + ".build"
    if is_uri(work):
        return
    option = "--tmp-dir" if tmp_dir else "--out"
    where = "" if tmp_dir else f" (the work folder beside it, {work}; --tmp-dir puts it elsewhere)"
    if os.path.exists(work) and not os.path.isdir(work):
        raise click.BadParameter(f"{work} is a file, not a folder{where}", param_hint=f"'{option}'")
    problem = writable_problem(Path(work))
    if problem is None and tmp_dir:
        # Made now, not when the build first writes there: os.access says yes where mkdir still fails
        # (root under /proc or /sys). The default OUT.build is left until then, not to litter on a refusal.
        try:
            os.makedirs(work, exist_ok=True)
        except OSError as e:
            problem = e.strerror or str(e)
    if problem:
        raise click.BadParameter(f"cannot make the work folder {work}{where}: {problem}", param_hint=f"'{option}'")


def tokenizer_files(spec: str) -> list[Path]:
    """The local files a --tokenizer reads: the file itself, or a folder's
    tokenizer.json and *.tiktoken, and the tokenizer_config.json beside them."""
    path = Path(spec).expanduser()
    if path.is_dir():
        files = [path / "tokenizer.json", *path.glob("*.tiktoken")]
    elif path.is_file():
        files = [path]
    else:
        return []  # a hub id
    return files + [f.parent / "tokenizer_config.json" for f in files]


def refuse_out_read(out: str, reads: Iterable[tuple[str, str | Path]]) -> None:
    """OutIsInputError when --out is (local paths after symlinks; URIs as
    written) one of the files the run reads, given as (what it is, path):
    writing the trie would destroy it. The CLI checks the tokenizer and a
    DART source; the build checks the shards once it has found them."""
    from indexer.build_config import OutIsInputError

    def resolved(location: str) -> str:
        return location if is_uri(location) else os.path.realpath(location)

    target = resolved(out)
    for what, path in reads:
        if resolved(str(path)) == target:
            raise OutIsInputError(f"--out {out} is {what} {path}: the trie would overwrite it; "
                                  "give --out another file")
