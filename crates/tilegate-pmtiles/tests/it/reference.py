"""Reads what tilegate-pmtiles wrote and computed with the reference implementations.

Usage: reference.py JOB.json RESULT.json. The job names an archive (and the rule its tiles were
made by) and tile matrix set questions; the result holds what `pmtiles` 3.8.1 and
`morecantile` 7.1.0 answer. The Rust test compares; this script only reports.
"""

import gzip
import importlib.resources
import json
import sys
import warnings

import morecantile
from pmtiles.reader import MmapSource, Reader, all_tiles
from pmtiles.tile import deserialize_directory, serialize_directory, zxy_to_tileid

warnings.simplefilter("ignore")


def content(z, x, y):
    """The archive's tile rule (the same as `reference.rs`'s); None for a tile left out."""
    if z == 8 and (x * 3 + y) % 11 == 5:
        return None
    if z == 8 and x < 16 and y < 16:
        return b"run"
    if (x + y) % 7 == 0:
        return b"empty"
    return (f"{z}/{x}/{y}|" * ((x * 31 + y * 17 + z) % 40 + 1)).encode()


def check_archive(job):
    out = {}
    with open(job["path"], "rb") as f:
        get_bytes = MmapSource(f)
        reader = Reader(get_bytes)
        header = reader.header()
        out["header"] = {
            k: (v.value if hasattr(v, "value") else v) for k, v in header.items()
        }
        out["metadata"] = reader.metadata()
        # Each directory's encoding, byte for byte: re-encoded by pmtiles from its own decoding.
        dirs = [(header["root_offset"], header["root_length"])]
        for e in deserialize_directory(get_bytes(*dirs[0])):
            if e.run_length == 0:
                dirs.append((header["leaf_directory_offset"] + e.offset, e.length))
        same = 0
        for offset, length in dirs:
            raw = get_bytes(offset, length)
            again = serialize_directory(deserialize_directory(raw))
            same += gzip.decompress(raw) == gzip.decompress(again)
        out["directories"] = len(dirs)
        out["directories_same"] = same
        seen = 0
        wrong = []
        for (z, x, y), data in all_tiles(get_bytes):
            seen += 1
            if content(z, x, y) != data:
                wrong.append([z, x, y])
        out["traversed"] = seen
        out["traversed_wrong"] = wrong[:20]
        expected = sum(
            1
            for z in range(job["max_zoom"] + 1)
            for x in range(1 << z)
            for y in range(1 << z)
            if content(z, x, y) is not None
        )
        out["expected"] = expected
        got_present = got_absent = 0
        get_wrong = []
        for z, x, y in job["gets"]:
            data = reader.get(z, x, y)
            want = content(z, x, y) if z <= job["max_zoom"] else None
            if data != want:
                get_wrong.append([z, x, y])
            elif data is None:
                got_absent += 1
            else:
                got_present += 1
        out["gets_present"] = got_present
        out["gets_absent"] = got_absent
        out["gets_wrong"] = get_wrong[:20]
    return out


def check_tms(job):
    out = {}
    for name, tiles in job["tiles"].items():
        tms = morecantile.tms.get(name)
        res = {}
        res["json"] = (
            importlib.resources.files("morecantile") / "data" / f"{name}.json"
        ).read_text()
        res["matrices"] = [
            {
                "cellSize": m.cellSize,
                "scaleDenominator": m.scaleDenominator,
                "matrixWidth": m.matrixWidth,
                "matrixHeight": m.matrixHeight,
                "tileWidth": m.tileWidth,
            }
            for m in tms.tileMatrices
        ]
        res["xy_bounds"] = [list(tms.xy_bounds(x, y, z)) for z, x, y in tiles]
        res["bounds"] = [list(tms.bounds(x, y, z)) for z, x, y in tiles]
        res["zoom_for_res"] = {
            s: [tms.zoom_for_res(r, zoom_level_strategy=s) for r in job["resolutions"][name]]
            for s in ("auto", "lower", "upper")
        }
        out[name] = res
    boxes = []
    for case in job["boxes"]:
        tms = morecantile.tms.get(case["tms"])
        w, s, e, n = case["bbox"]
        found = list(tms.tiles(w, s, e, n, [case["z"]]))
        inside = lambda t: any(
            r[0] <= t.x <= r[2] and r[1] <= t.y <= r[3] for r in case["ranges"]
        )
        boxes.append(
            {
                "count": len(found),
                "distinct": len({(t.x, t.y) for t in found}),
                "outside": [[t.x, t.y] for t in found if not inside(t)][:10],
            }
        )
    out["boxes"] = boxes
    return out


def check_tileids(cases):
    return [c for c in cases if zxy_to_tileid(c[0], c[1], c[2]) != c[3]]


def main():
    with open(sys.argv[1]) as f:
        job = json.load(f)
    result = {
        "versions": {
            "pmtiles": importlib.metadata.version("pmtiles"),
            "morecantile": importlib.metadata.version("morecantile"),
        },
        "archive": check_archive(job["archive"]),
        "tms": check_tms(job["tms"]),
        "tileids_wrong": check_tileids(job["tileids"]),
    }
    with open(sys.argv[2], "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    import importlib.metadata

    main()
