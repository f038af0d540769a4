"""The peers a user would write: every window of a scene as a COG tile with rasterio, on a
multiprocessing pool of one process per core. WRITER `rio-cogeo` (the default) writes each
window to a MemoryFile and turns it into a COG with rio-cogeo's `cog_translate`; `cog` writes
each window straight through GDAL's COG driver (`driver="COG"`, DEFLATE, 512-pixel blocks),
the fastest way rasterio has.

Usage: rasterio_tiles.py SCENE OUT_DIR WINDOW PROCESSES [WRITER]
"""

import os
import sys
from multiprocessing import Pool

import rasterio
from rasterio.io import MemoryFile
from rasterio.windows import Window
from rio_cogeo.cogeo import cog_translate
from rio_cogeo.profiles import cog_profiles


def tile(job):
    scene, out_dir, size, row, col, writer = job
    with rasterio.open(scene) as src:
        window = Window(col * size, row * size,
                        min(size, src.width - col * size), min(size, src.height - row * size))
        data = src.read(window=window)
        profile = src.profile.copy()
        profile.update(width=window.width, height=window.height,
                       transform=src.window_transform(window))
    out = os.path.join(out_dir, f"{row:04}_{col:04}.tif")
    if writer == "cog":
        for k in ("tiled", "blockxsize", "blockysize", "interleave"):
            profile.pop(k, None)
        profile.update(driver="COG", compress="DEFLATE", blocksize=512)
        with rasterio.open(out, "w", **profile) as dst:
            dst.write(data)
        return
    with MemoryFile() as mem:
        with mem.open(**profile) as tmp:
            tmp.write(data)
        with mem.open() as tmp:
            cog_translate(tmp, out, cog_profiles.get("deflate"), in_memory=True, quiet=True)


def main():
    scene, out_dir, size, processes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    writer = sys.argv[5] if len(sys.argv) > 5 else "rio-cogeo"
    os.makedirs(out_dir, exist_ok=True)
    with rasterio.open(scene) as src:
        rows = (src.height + size - 1) // size
        cols = (src.width + size - 1) // size
    jobs = [(scene, out_dir, size, r, c, writer) for r in range(rows) for c in range(cols)]
    with Pool(processes) as pool:
        pool.map(tile, jobs, chunksize=4)


if __name__ == "__main__":
    main()
