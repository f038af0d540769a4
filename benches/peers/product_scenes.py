"""Scenes for the product benchmark, written with Debian's GDAL and NumPy.

    python3 product_scenes.py OUTDIR COUNT SIZE

COUNT overlapping one-band UInt16 scenes of SIZE² 10 m pixels in EPSG:32632 (`b1.tif`, …),
each shifted by a third of its side from the one before on a ring, so that the middle of
the area has every scene and its edges fewer: nodata 0 with rectangular holes, a smooth
terrain-like field plus each scene's own offset, a TIFFTAG_DATETIME each, tiled and DEFLATE
compressed as delivered imagery is. Deterministic; prints nothing.
"""

import os
import sys

import numpy as np
from osgeo import gdal, osr

gdal.UseExceptions()

out, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(7)
srs = osr.SpatialReference()
srs.ImportFromEPSG(32632)
yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
for i in range(count):
    angle = 2 * np.pi * i / count
    west = 600_000 + (size * 10 / 3) * np.cos(angle)
    north = 5_300_000 + (size * 10 / 3) * np.sin(angle)
    field = (
        1000
        + 400 * np.sin((xx + 37 * i) / 97.0)
        + 300 * np.cos((yy - 11 * i) / 61.0)
        + 50 * i
    )
    noise = rng.integers(0, 40, size=(size, size), dtype=np.uint16)
    data = field.astype(np.uint16) + noise
    for _ in range(4):
        x0, y0 = rng.integers(0, size - size // 8, size=2)
        data[y0 : y0 + size // 10, x0 : x0 + size // 12] = 0
    path = os.path.join(out, f"b{i + 1}.tif")
    ds = gdal.GetDriverByName("GTiff").Create(
        path, size, size, 1, gdal.GDT_UInt16, ["TILED=YES", "COMPRESS=DEFLATE"]
    )
    ds.SetGeoTransform([float(west), 10.0, 0.0, float(north), 0.0, -10.0])
    ds.SetProjection(srs.ExportToWkt())
    ds.SetMetadataItem("TIFFTAG_DATETIME", f"2026:07:{i + 1:02d} 10:00:00")
    band = ds.GetRasterBand(1)
    band.SetNoDataValue(0)
    band.WriteArray(data)
    ds = None
