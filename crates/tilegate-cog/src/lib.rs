//! Window reads and COG encoding through GDAL, and synthetic sample scenes.
