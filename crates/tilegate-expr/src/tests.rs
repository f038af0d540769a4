use super::*;

fn eval1(src: &str, bands: &[(u32, f64)]) -> f64 {
    let p = Program::parse(src).unwrap_or_else(|e| panic!("{src}: {e}"));
    let data: Vec<(u32, Vec<f64>)> = bands.iter().map(|(b, v)| (*b, vec![*v])).collect();
    let band = |b: u32| -> &[f64] { &data.iter().find(|(x, _)| *x == b).expect("band given").1 };
    p.eval(0, 1, &band)[0]
}

fn err(src: &str) -> ExprError {
    Program::parse(src).expect_err(src)
}

#[test]
fn precedence_and_associativity() {
    assert_eq!(eval1("2^3^2", &[]), 512.0);
    assert_eq!(eval1("-2^2", &[]), -4.0);
    assert_eq!(eval1("2**-1", &[]), 0.5);
    assert_eq!(eval1("1-2-3", &[]), -4.0);
    assert_eq!(eval1("8/4/2", &[]), 1.0);
    assert_eq!(eval1("1+2*3", &[]), 7.0);
    assert_eq!(eval1("(1+2)*3", &[]), 9.0);
    assert_eq!(eval1("1 < 2 && 3 > 2 || 0", &[]), 1.0);
    assert_eq!(eval1("1 + 1 == 2", &[]), 1.0);
    assert_eq!(eval1("!0 + not 1", &[]), 1.0);
}

#[test]
fn modulo_follows_numpy() {
    assert_eq!(eval1("-7 % 3", &[]), 2.0);
    assert_eq!(eval1("7 % -3", &[]), -2.0);
    assert_eq!(eval1("7 % 3", &[]), 1.0);
    assert_eq!(eval1("-6 % 3", &[]), 0.0);
}

#[test]
fn functions_and_nan() {
    assert_eq!(
        eval1("where(b1 > 100, b1 * 0.5, b2)", &[(1, 300.0), (2, 7.0)]),
        150.0
    );
    assert_eq!(
        eval1("where(b1 > 100, b1 * 0.5, b2)", &[(1, 3.0), (2, 7.0)]),
        7.0
    );
    assert_eq!(eval1("sqrt(b1^2 + b2^2)", &[(1, 3.0), (2, 4.0)]), 5.0);
    assert_eq!(eval1("min(3, b1, 5)", &[(1, 1.0)]), 1.0);
    assert_eq!(eval1("max(3, b1, 5)", &[(1, 1.0)]), 5.0);
    assert_eq!(eval1("clamp(b1, 0, 10)", &[(1, 11.0)]), 10.0);
    assert_eq!(eval1("round(2.5) + round(3.5)", &[]), 6.0);
    assert_eq!(
        eval1("abs(-2) + floor(1.5) + ceil(1.5) + pow(2, 3)", &[]),
        13.0
    );
    assert!((eval1("log(e) + log10(100) + exp(0)", &[]) - 4.0).abs() < 1e-12);
    assert!(eval1("min(b1, 1)", &[(1, f64::NAN)]).is_nan());
    assert_eq!(eval1("b1 == b1", &[(1, f64::NAN)]), 0.0);
    assert_eq!(eval1("b1 != b1", &[(1, f64::NAN)]), 1.0);
    assert_eq!(eval1("where(b1, 1, 2)", &[(1, f64::NAN)]), 2.0);
    assert_eq!(eval1("1/0", &[]), f64::INFINITY);
    assert!(eval1("0/0", &[]).is_nan());
    assert_eq!(eval1("pi", &[]), std::f64::consts::PI);
}

#[test]
fn outputs_and_bands() {
    let p = Program::parse(" (b4-b3)/(b4+b3) ; B1 * 2 ;").unwrap();
    assert_eq!(p.outputs(), 2);
    assert_eq!(p.bands(), vec![1, 3, 4]);
    assert_eq!(p.output_bands(0), vec![3, 4]);
    assert_eq!(p.output_bands(1), vec![1]);
    assert_eq!(p.max_band(), 4);
    assert_eq!(p.canonical(), "((b4 - b3) / (b4 + b3)); (b1 * 2.0)");
    let c = Program::parse("3").unwrap();
    assert_eq!(c.eval(0, 3, &|_| &[]), vec![3.0; 3]);
}

#[test]
fn canonical_round_trips() {
    let cases = [
        "(b4-b3)/(b4+b3)",
        "where(b1 > 100, b1 * 0.5, b2); b3 * 2",
        "sqrt(b1^2 + b2**2)",
        "-b1^2",
        "-(b1)^2",
        "2^-1",
        "1e-3 * b1 + .5",
        "b1 and b2 or not b3",
        "!b1 || b2 && b3",
        "min(b1, b2, b3, -1)",
        "max(b1, 0)",
        "clamp(b1 * 1.5, -2.5, 1e10)",
        "b1 % -3",
        "(b1 <= 3) == 1",
        "((b1))",
        "pow(b1, 0.5) + log10(b2) - log(b3)",
        "where(b1 != b1, 0, b1)",
        "round(b1 / 7) * 7",
        "floor(b1) + ceil(b2) + abs(b3)",
        "-1 - -2 - +3",
        "pi * e",
        "0.1 + 0.2",
    ];
    for src in cases {
        let p = Program::parse(src).unwrap_or_else(|e| panic!("{src}: {e}"));
        let c = p.canonical();
        let again = Program::parse(&c).unwrap_or_else(|e| panic!("{c}: {e}"));
        assert_eq!(again, p, "{src} → {c}");
        assert_eq!(again.canonical(), c);
    }
}

#[test]
fn errors_name_the_fault_and_column() {
    let e = err("(b1 + b2");
    assert_eq!(
        (e.kind.clone(), e.column),
        (ExprErrorKind::UnbalancedParens, 1)
    );
    let e = err("b1 +* b2");
    assert_eq!(e.kind, ExprErrorKind::UnexpectedToken("*".into()));
    assert_eq!(e.column, 5);
    let e = err("sqr(b1)");
    assert_eq!((e.reason(), e.column), ("unknown-function", 1));
    assert!(e.to_string().contains("sqrt"), "{e}");
    assert_eq!(err("b0").kind, ExprErrorKind::BandZero);
    assert_eq!(err("b1 < b2 < b3").kind, ExprErrorKind::ChainedComparison);
    let e = err("where(b1, b2)");
    assert_eq!(e.reason(), "wrong-arity");
    assert_eq!(err("min(b1)").reason(), "wrong-arity");
    let e = err("b1;;b2");
    assert_eq!((e.kind.clone(), e.output), (ExprErrorKind::Empty, 2));
    assert_eq!(err("").kind, ExprErrorKind::Empty);
    assert_eq!(err("b1 $ 2").kind, ExprErrorKind::UnexpectedChar('$'));
    assert_eq!(
        err("red + 1").kind,
        ExprErrorKind::UnknownName("red".into())
    );
    assert_eq!(err("b1 +").kind, ExprErrorKind::UnexpectedEnd);
    assert_eq!(err("b1 = 2").reason(), "unexpected-token");
    assert_eq!(err("b1 )").kind, ExprErrorKind::UnexpectedToken(")".into()));
    assert_eq!(err("1.2.3").reason(), "bad-number");
    let e = err("b1; b2 +");
    assert_eq!((e.output, e.column), (2, 9));
}

#[test]
fn whole_arrays_match_a_scalar_reference() {
    let n = 4096;
    let b1: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin() * 100.0).collect();
    let b2: Vec<f64> = (0..n).map(|i| (i % 17) as f64 - 8.0).collect();
    let p =
        Program::parse("where(b1 > b2, (b1 - b2) / (b1 + b2), b2 % 3) + sqrt(abs(b1))").unwrap();
    let got = p.eval(0, n, &|b| if b == 1 { &b1 } else { &b2 });
    for i in 0..n {
        let (x, y) = (b1[i], b2[i]);
        let want = if x > y {
            (x - y) / (x + y)
        } else {
            floored_mod(y, 3.0)
        } + x.abs().sqrt();
        assert!(got[i] == want || (got[i].is_nan() && want.is_nan()), "{i}");
    }
}

#[test]
fn no_input_panics() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let alphabet: Vec<char> = "b1234567890+-*/%^!<>=&|(),.;eEpiwhr ".chars().collect();
    for _ in 0..2000 {
        let len = (seed % 24) as usize;
        let s: String = (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                alphabet[(seed % alphabet.len() as u64) as usize]
            })
            .collect();
        let _ = Program::parse(&s);
    }
}
