"""The Triton cache that the peer harnesses (fla_mixer_bench.py, fla_model_step.py) carry between
device calls: unpack a .tgz before anything compiles, pack it again afterwards (docs/PEER.md).

Triton's group files record ABSOLUTE child paths, so a packed cache only hits when it is unpacked
at the same TRITON_CACHE_DIR it was written at: keep /tmp/triton-cache everywhere. Importing this
module sets TRITON_CACHE_DIR to that default unless it is set already; import it before torch.
"""
import io
import os
import tarfile

os.environ.setdefault("TRITON_CACHE_DIR", "/tmp/triton-cache")


def cache_dir():
    return os.environ["TRITON_CACHE_DIR"]


def cache_stats(root):
    files, total, autotune = 0, 0, 0
    for d, _, fs in os.walk(root):
        for f in fs:
            files += 1
            total += os.path.getsize(os.path.join(d, f))
            autotune += f.endswith(".autotune.json")
    return {"files": files, "bytes": total, "autotune_json": autotune}


def unpack_cache(path):
    root = cache_dir()
    os.makedirs(root, exist_ok=True)
    if not path or not os.path.exists(path):
        return {"cache_in": path, "unpacked": False}
    with tarfile.open(path, "r:gz") as tf:
        tf.extractall(root, filter="data")
    return {"cache_in": path, "unpacked": True, **cache_stats(root)}


def pack_cache(path, limit):
    """Whole cache if it fits in `limit` bytes; else only the kernel dirs holding autotune results."""
    root = cache_dir()

    def build(select):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tf:
            for name in sorted(os.listdir(root)):
                full = os.path.join(root, name)
                if select(full):
                    tf.add(full, arcname=name)
        return buf.getvalue()

    if not os.path.isdir(root):
        return {"cache_out": None, "why": f"{root} does not exist"}
    data, what = build(lambda d: True), "full"
    if len(data) > limit:
        data, what = build(lambda d: os.path.isdir(d) and any(f.endswith(".autotune.json")
                                                              for f in os.listdir(d))), "autotune-only"
    if len(data) > limit:
        return {"cache_out": None, "why": f"even autotune-only is {len(data)} B > {limit}"}
    with open(path, "wb") as f:
        f.write(data)
    return {"cache_out": path, "contents": what, "tgz_bytes": len(data), **cache_stats(root)}
