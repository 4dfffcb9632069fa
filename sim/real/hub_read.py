"""Read a Hugging Face cache with huggingface_hub itself.

What `orchestrate data get` (the Go hub client) wrote must read back as
huggingface_hub reads its cache: try_to_load_from_cache for each file (by
branch and by commit), and scan_cache_dir over the whole cache, with no
warning (a corrupted repository, a snapshot pointing nowhere). Prints one
JSON object (sim/real/hub_test.go compares it with what was served).

Usage: python hub_read.py CACHE_DIR FILES_JSON
FILES_JSON: [{"repo": "org/name", "type": "model"|"dataset", "revision": "main", "path": "a/b"}, ...]
"""

import hashlib
import json
import sys

import huggingface_hub
from huggingface_hub import scan_cache_dir, try_to_load_from_cache


def main():
    cache, files = sys.argv[1], json.loads(sys.argv[2])
    out = {"huggingface_hub": huggingface_hub.__version__, "files": [], "repos": [], "warnings": []}
    for f in files:
        got = try_to_load_from_cache(f["repo"], f["path"], cache_dir=cache, revision=f["revision"], repo_type=f["type"])
        entry = dict(f)
        if isinstance(got, str):
            with open(got, "rb") as fh:
                entry["sha256"] = hashlib.sha256(fh.read()).hexdigest()
        else:
            entry["missing"] = repr(got)
        out["files"].append(entry)
    info = scan_cache_dir(cache)
    for repo in sorted(info.repos, key=lambda r: (r.repo_type, r.repo_id)):
        out["repos"].append({
            "repo": repo.repo_id,
            "type": repo.repo_type,
            "files": repo.nb_files,
            "size_on_disk": repo.size_on_disk,
            "refs": sorted(repo.refs),
            "revisions": sorted(r.commit_hash for r in repo.revisions),
        })
    out["warnings"] = [str(w) for w in info.warnings]
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
