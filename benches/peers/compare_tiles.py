"""The pyramid benchmark's pixel comparison: the tiles of several web pyramids of one scene,
each a `z/x/y.png` directory or a PMTiles archive, decoded and compared tile by tile. Prints
one JSON document: each pyramid's tile count per zoom (and how many of its tiles are fully
transparent), and for each pair — the first pyramid against every other, then the others
among themselves (but for those named FIRST_…, other forms of the first) — per zoom and over
all zooms: the tiles in both and in one only, the fraction of common tiles identical after
decoding (RGBA), the mean absolute difference of R, G and B over the pixels valid in both,
and the count of pixels valid in one only (valid: alpha, or the GDAL mask of a tile without
alpha, above 0).

Runs in a virtual environment with rasterio (the decoder) and pmtiles (the archive reader).

Usage: compare_tiles.py NAME=PATH NAME=PATH [NAME=PATH ...]
"""

import json
import os
import sys
from collections import defaultdict

import numpy as np
import rasterio
from pmtiles.reader import MmapSource, all_tiles
from rasterio.io import MemoryFile


def load(path):
    """{(z, x, y): encoded bytes} of a z/x/y directory or a PMTiles archive."""
    tiles = {}
    if os.path.isdir(path):
        for z in os.listdir(path):
            if not z.isdigit():
                continue
            for x in os.listdir(os.path.join(path, z)):
                if not x.isdigit():
                    continue
                for name in os.listdir(os.path.join(path, z, x)):
                    y, ext = os.path.splitext(name)
                    if ext == ".png" and y.isdigit():
                        with open(os.path.join(path, z, x, name), "rb") as f:
                            tiles[(int(z), int(x), int(y))] = f.read()
    else:
        with open(path, "rb") as f:
            for (z, x, y), data in all_tiles(MmapSource(f)):
                tiles[(z, x, y)] = bytes(data)
    return tiles


def decode(data):
    """(RGBA uint8 array of shape (4, h, w), band count) of one encoded tile."""
    with MemoryFile(data) as mem, mem.open() as ds:
        bands = ds.read()
        mask = ds.dataset_mask()
    n = bands.shape[0]
    if n in (1, 2):
        rgb = np.repeat(bands[:1], 3, axis=0)
    else:
        rgb = bands[:3]
    alpha = bands[3] if n == 4 else bands[1] if n == 2 else mask
    return np.concatenate([rgb, alpha[None]]), n


def counts(tiles):
    per = defaultdict(int)
    for z, _, _ in tiles:
        per[z] += 1
    return per


def main():
    named = [a.split("=", 1) for a in sys.argv[1:]]
    pyramids = {name: load(path) for name, path in named}
    decoded = {name: {} for name in pyramids}

    def get(name, key):
        d = decoded[name]
        if key not in d:
            d[key] = decode(pyramids[name][key])
        return d[key]

    doc = {"pyramids": {}, "pairs": []}
    for name, tiles in pyramids.items():
        per = counts(tiles)
        transparent = defaultdict(int)
        bands = defaultdict(int)
        for key in tiles:
            px, n = get(name, key)
            bands[n] += 1
            if not px[3].any():
                transparent[key[0]] += 1
        doc["pyramids"][name] = {
            "tiles": len(tiles),
            "per_zoom": {str(z): per[z] for z in sorted(per)},
            "fully_transparent_per_zoom": {str(z): transparent[z] for z in sorted(transparent)},
            "bands": {str(n): c for n, c in sorted(bands.items())},
        }
    names = [n for n, _ in named]
    pairs = [(names[0], b) for b in names[1:]]
    # The others among themselves, but for another form of the first (`tilegate_pmtiles`).
    rest = [n for n in names[1:] if not n.startswith(names[0] + "_")]
    pairs += [(a, b) for i, a in enumerate(rest) for b in rest[i + 1:]]
    for a, b in pairs:
        ta, tb = pyramids[a], pyramids[b]
        zooms = sorted({k[0] for k in ta} | {k[0] for k in tb})
        per_zoom = {}
        for z in zooms + ["all"]:
            ka = {k for k in ta if z in ("all", k[0])}
            kb = {k for k in tb if z in ("all", k[0])}
            both = sorted(ka & kb)
            identical = encoded_identical = valid_differs = valid_both = 0
            abs_sum = 0.0
            for key in both:
                if ta[key] == tb[key]:
                    encoded_identical += 1
                pa, _ = get(a, key)
                pb, _ = get(b, key)
                if np.array_equal(pa, pb):
                    identical += 1
                va, vb = pa[3] > 0, pb[3] > 0
                valid_differs += int(np.count_nonzero(va != vb))
                v = va & vb
                n = int(np.count_nonzero(v))
                if n:
                    d = np.abs(pa[:3].astype(np.int16) - pb[:3].astype(np.int16))
                    abs_sum += float(d[:, v].sum())
                    valid_both += n
            per_zoom[str(z)] = {
                "in_both": len(both),
                f"only_{a}": len(ka - kb),
                f"only_{b}": len(kb - ka),
                "identical_fraction": identical / len(both) if both else None,
                "encoded_identical": encoded_identical,
                "mean_abs_diff_rgb": abs_sum / (3 * valid_both) if valid_both else None,
                "pixels_valid_in_both": valid_both,
                "pixels_validity_differs": valid_differs,
            }
        doc["pairs"].append({"a": a, "b": b, "per_zoom": per_zoom})
    json.dump(doc, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
