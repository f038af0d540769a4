"""Compare the product benchmark's outputs: each tilegate tile COG against the peer's tile.

    python3 product_compare.py PAIRS.json

PAIRS.json: [[tilegate COG, peer GeoTIFF], …]. Prints {"tiles", "pixels", "valid", "differ",
"max_abs_diff"} (NaN equal to NaN).
"""

import json
import sys

import numpy as np
from osgeo import gdal

gdal.UseExceptions()
pairs = json.load(open(sys.argv[1]))
pixels = valid = differ = 0
worst = 0.0
for ours, theirs in pairs:
    # Each dataset held while its band is read (GDAL's Python bindings crash otherwise).
    da, db = gdal.Open(ours), gdal.Open(theirs)
    a = da.GetRasterBand(1).ReadAsArray()
    b = db.GetRasterBand(1).ReadAsArray()
    assert a.shape == b.shape, (ours, a.shape, b.shape)
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    pixels += a.size
    valid += int((~np.isnan(b)).sum())
    differ += int((~same).sum())
    both = ~np.isnan(a) & ~np.isnan(b)
    if both.any():
        worst = max(worst, float(np.abs(a[both] - b[both]).max()))
print(json.dumps({"tiles": len(pairs), "pixels": pixels, "valid": valid, "differ": differ,
                  "max_abs_diff": worst}))
