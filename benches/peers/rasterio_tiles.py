"""The peer a user would write: every window of a scene as a COG tile, with rasterio and
rio-cogeo, on a multiprocessing pool of one process per core.

Usage: rasterio_tiles.py SCENE OUT_DIR WINDOW PROCESSES
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
    scene, out_dir, size, row, col = job
    with rasterio.open(scene) as src:
        window = Window(col * size, row * size,
                        min(size, src.width - col * size), min(size, src.height - row * size))
        data = src.read(window=window)
        profile = src.profile.copy()
        profile.update(width=window.width, height=window.height,
                       transform=src.window_transform(window))
    out = os.path.join(out_dir, f"{row:04}_{col:04}.tif")
    with MemoryFile() as mem:
        with mem.open(**profile) as tmp:
            tmp.write(data)
        with mem.open() as tmp:
            cog_translate(tmp, out, cog_profiles.get("deflate"), in_memory=True, quiet=True)


def main():
    scene, out_dir, size, processes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    os.makedirs(out_dir, exist_ok=True)
    with rasterio.open(scene) as src:
        rows = (src.height + size - 1) // size
        cols = (src.width + size - 1) // size
    jobs = [(scene, out_dir, size, r, c) for r in range(rows) for c in range(cols)]
    with Pool(processes) as pool:
        pool.map(tile, jobs, chunksize=4)


if __name__ == "__main__":
    main()
