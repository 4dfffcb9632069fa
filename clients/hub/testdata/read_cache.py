"""Read a file back from a Hugging Face hub cache the way huggingface_hub's
try_to_load_from_cache does (file_download.py, read for docs/research/
hf-hub.md): the repository folder {type}s--{org}--{name}, the commit named by
refs/{revision} (no trailing newline), then snapshots/{commit}/{path}, which
must resolve (a relative symlink into blobs/). Standard library only: the
program's Go tests run it when python3 is on the machine.

    python3 read_cache.py CACHE TYPE REPO REVISION PATH   -> prints the sha256 of the file
"""
import hashlib
import os
import sys


def main():
    cache, typ, repo, revision, path = sys.argv[1:6]
    folder = os.path.join(cache, f"{typ}s--" + repo.replace("/", "--"))
    ref = os.path.join(folder, "refs", revision)
    if os.path.isfile(ref):
        with open(ref) as f:
            commit = f.read()
        if commit != commit.strip():
            sys.exit(f"{ref}: whitespace around the commit")
    else:
        commit = revision
    snapshot = os.path.join(folder, "snapshots", commit, path)
    if not os.path.islink(snapshot):
        sys.exit(f"{snapshot}: not a symlink")
    target = os.readlink(snapshot)
    if os.path.isabs(target) or "blobs" not in target.split(os.sep):
        sys.exit(f"{snapshot}: links to {target}, not a relative path into blobs/")
    with open(snapshot, "rb") as f:
        print(hashlib.sha256(f.read()).hexdigest())


if __name__ == "__main__":
    main()
