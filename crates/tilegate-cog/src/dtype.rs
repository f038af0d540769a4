//! The raster data types tilegate reads and writes, named as GDAL names them.

use gdal_sys::GDALDataType;
use std::fmt;

/// A supported pixel type. Complex types and the 64-bit and 8-bit signed integer types are
/// refused ([`crate::CogError::UnsupportedDtype`]): the COG tiles and the assembler handle
/// these seven only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    Byte,
    UInt16,
    Int16,
    UInt32,
    Int32,
    Float32,
    Float64,
}

impl Dtype {
    /// Every supported type, narrowest first.
    pub const ALL: [Dtype; 7] = [
        Self::Byte,
        Self::UInt16,
        Self::Int16,
        Self::UInt32,
        Self::Int32,
        Self::Float32,
        Self::Float64,
    ];

    /// GDAL's name (`Byte`, `UInt16`, ...), as stored in [`tilegate_core::source::SceneMeta`].
    pub fn name(self) -> &'static str {
        match self {
            Self::Byte => "Byte",
            Self::UInt16 => "UInt16",
            Self::Int16 => "Int16",
            Self::UInt32 => "UInt32",
            Self::Int32 => "Int32",
            Self::Float32 => "Float32",
            Self::Float64 => "Float64",
        }
    }

    /// Parse GDAL's name (case-insensitive).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|d| d.name().eq_ignore_ascii_case(name.trim()))
    }

    /// Bytes per sample.
    pub fn size(self) -> usize {
        match self {
            Self::Byte => 1,
            Self::UInt16 | Self::Int16 => 2,
            Self::UInt32 | Self::Int32 | Self::Float32 => 4,
            Self::Float64 => 8,
        }
    }

    /// The nodata value a computed output of this type gets by default: -9999 for floats and
    /// signed integers, the maximum for unsigned ones.
    pub fn default_nodata(self) -> f64 {
        match self {
            Self::Byte | Self::UInt16 | Self::UInt32 => self.range().1,
            _ => -9999.0,
        }
    }

    /// `v` as a sample of this type: integers rounded half to even and clamped to the range
    /// (NaN becomes 0), floats converted (Float32 rounds to nearest).
    pub fn convert(self, v: f64) -> f64 {
        if self.is_float() {
            return if self == Self::Float32 {
                f64::from(v as f32)
            } else {
                v
            };
        }
        if v.is_nan() {
            return 0.0;
        }
        let (lo, hi) = self.range();
        v.round_ties_even().clamp(lo, hi)
    }

    /// Encode `f64` samples (already [`Dtype::convert`]ed) as native-endian bytes of this type.
    pub fn encode_f64(self, values: &[f64], out: &mut Vec<u8>) {
        out.reserve(values.len() * self.size());
        for &v in values {
            match self {
                Self::Byte => out.push(v as u8),
                Self::UInt16 => out.extend_from_slice(&(v as u16).to_ne_bytes()),
                Self::Int16 => out.extend_from_slice(&(v as i16).to_ne_bytes()),
                Self::UInt32 => out.extend_from_slice(&(v as u32).to_ne_bytes()),
                Self::Int32 => out.extend_from_slice(&(v as i32).to_ne_bytes()),
                Self::Float32 => out.extend_from_slice(&(v as f32).to_ne_bytes()),
                Self::Float64 => out.extend_from_slice(&v.to_ne_bytes()),
            }
        }
    }

    /// True for Float32 and Float64.
    pub fn is_float(self) -> bool {
        matches!(self, Self::Float32 | Self::Float64)
    }

    /// The smallest and largest value of the type (finite range for floats).
    pub fn range(self) -> (f64, f64) {
        match self {
            Self::Byte => (0.0, f64::from(u8::MAX)),
            Self::UInt16 => (0.0, f64::from(u16::MAX)),
            Self::Int16 => (f64::from(i16::MIN), f64::from(i16::MAX)),
            Self::UInt32 => (0.0, f64::from(u32::MAX)),
            Self::Int32 => (f64::from(i32::MIN), f64::from(i32::MAX)),
            Self::Float32 => (f64::from(f32::MIN), f64::from(f32::MAX)),
            Self::Float64 => (f64::MIN, f64::MAX),
        }
    }

    /// True if `v` is exactly representable in this type (NaN only for floats).
    pub fn represents(self, v: f64) -> bool {
        if self.is_float() {
            return v.is_nan()
                || v.is_infinite()
                || self == Self::Float64
                || f64::from(v as f32) == v;
        }
        let (lo, hi) = self.range();
        v.fract() == 0.0 && v >= lo && v <= hi
    }

    /// The GDAL type code.
    pub fn gdal(self) -> GDALDataType::Type {
        match self {
            Self::Byte => GDALDataType::GDT_Byte,
            Self::UInt16 => GDALDataType::GDT_UInt16,
            Self::Int16 => GDALDataType::GDT_Int16,
            Self::UInt32 => GDALDataType::GDT_UInt32,
            Self::Int32 => GDALDataType::GDT_Int32,
            Self::Float32 => GDALDataType::GDT_Float32,
            Self::Float64 => GDALDataType::GDT_Float64,
        }
    }

    /// The supported type for a GDAL type code, or `None` (complex, 64-bit integers, unknown).
    pub fn from_gdal(t: GDALDataType::Type) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.gdal() == t)
    }

    /// Decode native-endian samples of this type into `f64` (exact for every supported type).
    pub fn decode_f64(self, bytes: &[u8]) -> Vec<f64> {
        fn conv<const N: usize>(bytes: &[u8], f: impl Fn([u8; N]) -> f64) -> Vec<f64> {
            bytes
                .chunks_exact(N)
                .map(|c| {
                    let mut a = [0u8; N];
                    a.copy_from_slice(c);
                    f(a)
                })
                .collect()
        }
        match self {
            Self::Byte => bytes.iter().map(|&b| f64::from(b)).collect(),
            Self::UInt16 => conv(bytes, |a| f64::from(u16::from_ne_bytes(a))),
            Self::Int16 => conv(bytes, |a| f64::from(i16::from_ne_bytes(a))),
            Self::UInt32 => conv(bytes, |a| f64::from(u32::from_ne_bytes(a))),
            Self::Int32 => conv(bytes, |a| f64::from(i32::from_ne_bytes(a))),
            Self::Float32 => conv(bytes, |a| f64::from(f32::from_ne_bytes(a))),
            Self::Float64 => conv(bytes, f64::from_ne_bytes),
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_roundtrip() {
        for d in Dtype::ALL {
            assert_eq!(Dtype::from_name(d.name()), Some(d));
            assert_eq!(Dtype::from_gdal(d.gdal()), Some(d));
        }
        assert_eq!(Dtype::from_name("int64"), None);
        assert_eq!(Dtype::from_gdal(GDALDataType::GDT_CFloat32), None);
    }

    #[test]
    fn representable() {
        assert!(Dtype::Byte.represents(255.0));
        assert!(!Dtype::Byte.represents(-1.0));
        assert!(!Dtype::UInt16.represents(0.5));
        assert!(Dtype::Float32.represents(-9999.0));
        assert!(!Dtype::Float32.represents(0.1));
        assert!(Dtype::Float32.represents(f64::NAN));
    }
}
