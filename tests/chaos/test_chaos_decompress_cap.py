"""Every decompressor stops at its cap, whatever the frame header claims: measured as peak RSS.

Each case runs in its own process: it builds a bomb (100 MiB of zeros, compressed in chunks so
building it costs little memory), notes its peak RSS, decompresses with an 8 MiB cap and reports
the growth of the peak. Before the fix, the lying lz4 frame (0.86 MB declaring 1,000 bytes, the
one from issue 11) took the process to ~214 MiB.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CHILD = r'''
import json, resource, sys
MIB = 1 << 20
codec, variant = sys.argv[1], sys.argv[2]
chunks = (b"\0" * MIB for _ in range(100))

def streamed(obj, feed="compress", end="flush"):
    return b"".join(getattr(obj, feed)(c) for c in chunks) + getattr(obj, end)()

if codec == "lz4":
    import lz4.frame
    c = lz4.frame.LZ4FrameCompressor(content_checksum=False)
    head = c.begin(source_size=1000 if variant == "lying" else 0)
    data = head + b"".join(c.compress(x) for x in chunks) + b"\0\0\0\0"  # end mark; the header says 1,000
elif codec == "zstd":
    import zstandard
    data = streamed(zstandard.ZstdCompressor().compressobj())  # no content size in the header
elif codec in ("zlib", "gzip", "deflate"):
    import zlib
    data = streamed(zlib.compressobj(9, zlib.DEFLATED, {"zlib": 15, "gzip": 31, "deflate": -15}[codec]))
elif codec == "bz2":
    import bz2
    data = streamed(bz2.BZ2Compressor(9))
elif codec == "xz":
    import lzma
    data = streamed(lzma.LZMACompressor(format=lzma.FORMAT_XZ, preset=0))
elif codec == "brotli":
    import brotli
    data = streamed(brotli.Compressor(quality=1), "process", "finish")
from wirepipe.codecs.compression import get_codec
decompress = get_codec(codec).decompressor(8 * MIB)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    out = decompress(data)
    result = f"returned {len(out)} bytes"
except Exception as exc:
    result = f"{type(exc).__name__}: {exc}"
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"compressed": len(data), "growth_mib": (after - before) / 1024, "result": result}))
'''

CASES = [("lz4", "lying"), ("lz4", "unsized"), ("zstd", "unsized"), ("zlib", "-"), ("gzip", "-"),
         ("deflate", "-"), ("bz2", "-"), ("xz", "-"), ("brotli", "-")]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("codec", "variant"), CASES)
def test_a_bomb_is_refused_with_bounded_memory(codec: str, variant: str) -> None:
    done = subprocess.run([sys.executable, "-c", CHILD, codec, variant], capture_output=True, text=True, timeout=50)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    print(codec, variant, report)
    assert "returned" not in report["result"], report
    assert "exceeds max_output_size" in report["result"] or "declares" in report["result"], report
    assert report["growth_mib"] < 40, f"{codec}: peak RSS grew {report['growth_mib']:.0f} MiB against an 8 MiB cap"
