//! `per_backend!`: one test per backend for a pipeline test written as a function of its
//! [`Target`](tilegate_tests::Target), as `conformance_suite!` does for the store contracts.

/// For each `name`, a module `name` holding the tests `embedded` and `aws`, each calling the
/// enclosing module's `fn name(target: Target)` on its backend. The AWS test skips (with a
/// printed reason) without the emulator outside CI and fails without it in CI
/// ([`Target::aws`](tilegate_tests::Target::aws)).
macro_rules! per_backend {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn embedded() {
                    super::$name(tilegate_tests::Target::Embedded);
                }

                #[test]
                fn aws() {
                    if let Some(target) = tilegate_tests::Target::aws(stringify!($name)) {
                        super::$name(target);
                    }
                }
            }
        )*
    };
}
pub(crate) use per_backend;
