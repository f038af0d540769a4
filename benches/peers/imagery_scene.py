"""The benchmark's "imagery" scene: three Byte bands (RGB) that look and compress like a natural
image rather than smooth terrain — fields and patches at several scales, texture, and sensor
noise — written as a tiled (512×512), DEFLATE-compressed GeoTIFF in UTM zone 33N. The same
arguments give the same pixels (NumPy's PCG64 seeded per octave and per block row).

Usage: imagery_scene.py OUT SIZE [SEED]
"""

import sys

import numpy as np
from osgeo import gdal, osr

BLOCK = 512
# (cell size in pixels, amplitude in DN) of the value-noise octaves: fields, parcels, texture.
OCTAVES = [(1024, 70.0), (256, 45.0), (64, 30.0), (16, 18.0), (4, 10.0)]
# Per-band gain and offset of the shared structure (vegetation, soil and water tones differ).
BANDS = [(1.00, 95.0), (0.85, 105.0), (0.70, 90.0)]
# Independent per-band pattern and per-pixel sensor noise (standard deviations, DN).
BAND_PATTERN = 12.0
SENSOR_NOISE = 3.0


def lattice(rng, size, cell):
    n = size // cell + 2
    return rng.standard_normal((n, n)).astype(np.float32)


def sample(lat, cell, y0, rows, size):
    """Bilinear value noise of `lat` over rows y0..y0+rows, all columns."""
    ys = (np.arange(y0, y0 + rows, dtype=np.float32) + 0.5) / cell
    xs = (np.arange(size, dtype=np.float32) + 0.5) / cell
    iy, ix = ys.astype(np.int64), xs.astype(np.int64)
    fy, fx = (ys - iy)[:, None], (xs - ix)[None, :]
    # Smoothstep keeps the cells from showing as a grid.
    fy, fx = fy * fy * (3 - 2 * fy), fx * fx * (3 - 2 * fx)
    a = lat[iy][:, ix]
    b = lat[iy][:, ix + 1]
    c = lat[iy + 1][:, ix]
    d = lat[iy + 1][:, ix + 1]
    return (a * (1 - fx) + b * fx) * (1 - fy) + (c * (1 - fx) + d * fx) * fy


def main():
    out, size = sys.argv[1], int(sys.argv[2])
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    shared = [lattice(np.random.default_rng([seed, i]), size, c) for i, (c, _) in enumerate(OCTAVES)]
    own = [lattice(np.random.default_rng([seed, 100 + b]), size, 32) for b in range(len(BANDS))]
    drv = gdal.GetDriverByName("GTiff")
    ds = drv.Create(out, size, size, len(BANDS), gdal.GDT_Byte,
                    ["TILED=YES", f"BLOCKXSIZE={BLOCK}", f"BLOCKYSIZE={BLOCK}",
                     "COMPRESS=DEFLATE", "PHOTOMETRIC=RGB", "INTERLEAVE=PIXEL", "BIGTIFF=IF_SAFER"])
    ds.SetGeoTransform([500000.0, 10.0, 0.0, 5000000.0, 0.0, -10.0])
    srs = osr.SpatialReference()
    srs.ImportFromEPSG(32633)
    ds.SetProjection(srs.ExportToWkt())
    for b in range(len(BANDS)):
        ds.GetRasterBand(b + 1).SetColorInterpretation(
            [gdal.GCI_RedBand, gdal.GCI_GreenBand, gdal.GCI_BlueBand][b])
    for y0 in range(0, size, BLOCK):
        rows = min(BLOCK, size - y0)
        base = sum(amp * sample(lat, c, y0, rows, size) for lat, (c, amp) in zip(shared, OCTAVES))
        noise = np.random.default_rng([seed, 1000, y0])
        for b, (gain, offset) in enumerate(BANDS):
            v = offset + gain * base + BAND_PATTERN * sample(own[b], 32, y0, rows, size)
            v += noise.normal(0.0, SENSOR_NOISE, v.shape).astype(np.float32)
            ds.GetRasterBand(b + 1).WriteArray(np.clip(np.rint(v), 0, 255).astype(np.uint8), 0, y0)
    ds.FlushCache()
    ds = None


if __name__ == "__main__":
    main()
