//! `per_backend!`: the one way a test of `tests/it` runs once per backend — a test written as a
//! function of its [`Target`](tilegate_tests::Target), expanded into one `#[test]` per backend.
//! (The store contracts run the same way from each backend's own crate, through
//! `tilegate_conformance::conformance_suite!`.)

/// For each `name`, a module `name` holding one test per backend (`embedded` and `aws` unless a
/// list follows the name: `per_backend!(name: [embedded, aws, gcs, azure]);`), each calling
/// the enclosing module's `fn name(target: Target)` on its backend
/// ([`Target::named`](tilegate_tests::Target::named)). A test on an emulator skips (with a
/// printed reason) without it outside CI and fails without it in CI.
macro_rules! per_backend {
    ($name:ident: [$($backend:ident),+ $(,)?]) => {
        mod $name {
            $(
                #[test]
                fn $backend() {
                    let test = concat!(stringify!($name), "::", stringify!($backend));
                    if let Some(target) = tilegate_tests::Target::named(stringify!($backend), test) {
                        super::$name(target);
                    }
                }
            )+
        }
    };
    ($($name:ident),+ $(,)?) => {
        $(per_backend!($name: [embedded, aws]);)+
    };
}
pub(crate) use per_backend;
