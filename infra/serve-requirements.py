"""Prints the requirements of serving (ngram_service: ngram-serve, ngram-info,
ngram-query) as pyproject.toml states them, one per line, for the image's
runtime venv (infra/Containerfile). The build's own dependencies (DuckDB,
tokenizers, tiktoken, psutil) stay out of the image."""
import re
import sys
import tomllib

# What ngram_service imports: the engine's arrays, the client, the fetch
# (pyarrow.fs for s3:// and gs://), compressed tries, the command lines.
SERVING = ("numpy", "pyarrow", "zstandard", "click", "grpcio", "protobuf")

with open(sys.argv[1], "rb") as f:
    deps = tomllib.load(f)["project"]["dependencies"]
by_name = {re.split(r"[<>=!~ \[;]", d, maxsplit=1)[0].lower(): d for d in deps}
missing = [n for n in SERVING if n not in by_name]
if missing:
    sys.exit(f"serve-requirements: {missing} not in {sys.argv[1]}'s dependencies")
print("\n".join(by_name[n] for n in SERVING))
