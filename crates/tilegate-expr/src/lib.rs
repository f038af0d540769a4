//! Band math for the `expr` recipe: `;`-separated expressions over bands `b1`, `b2`, …,
//! parsed and validated once (when planning) and evaluated per window over whole arrays of
//! `f64` samples, one AST node at a time.
//!
//! * Numbers (`12`, `.5`, `1e-3`), bands `b1`…, constants `pi` and `e`.
//! * Operators, lowest to highest: `||` (`or`), `&&` (`and`), comparisons `== != < <= > >=`
//!   (not chained), `+ -`, `* / %`, unary `- + !` (`not`), power `^` (`**`, right-associative,
//!   so `-b1^2` is `-(b1^2)`). Booleans are 1 and 0; a value is true when it is non-zero (NaN
//!   is false).
//! * Functions: `where(cond, a, b)`, `abs`, `sqrt`, `exp`, `log`, `log10`, `floor`, `ceil`,
//!   `round` (half to even), `min`/`max` (two or more arguments; NaN propagates, as NumPy's
//!   `minimum`), `clamp(x, lo, hi)`, `pow(a, b)`.
//! * Arithmetic is IEEE `f64` as in NumPy: `x / 0` is ±inf or NaN; `%` is floored (the result
//!   has the divisor's sign, NumPy's `mod`).

use std::fmt;

mod parse;

/// A node of an expression.
#[derive(Debug, Clone, PartialEq)]
enum Expr {
    Num(f64),
    Band(u32),
    Unary(Un, Box<Expr>),
    Binary(Bin, Box<Expr>, Box<Expr>),
    Call(Func, Vec<Expr>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Un {
    Neg,
    Plus,
    Not,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bin {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Pow,
}

impl Bin {
    fn symbol(self) -> &'static str {
        match self {
            Self::Or => "||",
            Self::And => "&&",
            Self::Eq => "==",
            Self::Ne => "!=",
            Self::Lt => "<",
            Self::Le => "<=",
            Self::Gt => ">",
            Self::Ge => ">=",
            Self::Add => "+",
            Self::Sub => "-",
            Self::Mul => "*",
            Self::Div => "/",
            Self::Mod => "%",
            Self::Pow => "^",
        }
    }

    fn apply(self, a: f64, b: f64) -> f64 {
        let truth = |v: bool| if v { 1.0 } else { 0.0 };
        match self {
            Self::Or => truth(is_true(a) || is_true(b)),
            Self::And => truth(is_true(a) && is_true(b)),
            Self::Eq => truth(a == b),
            Self::Ne => truth(a != b),
            Self::Lt => truth(a < b),
            Self::Le => truth(a <= b),
            Self::Gt => truth(a > b),
            Self::Ge => truth(a >= b),
            Self::Add => a + b,
            Self::Sub => a - b,
            Self::Mul => a * b,
            Self::Div => a / b,
            Self::Mod => floored_mod(a, b),
            Self::Pow => a.powf(b),
        }
    }
}

/// The functions, with their arity (`None`: two or more).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Func {
    Where,
    Abs,
    Sqrt,
    Exp,
    Log,
    Log10,
    Floor,
    Ceil,
    Round,
    Min,
    Max,
    Clamp,
    Pow,
}

const FUNCS: [(&str, Func, Option<usize>); 13] = [
    ("where", Func::Where, Some(3)),
    ("abs", Func::Abs, Some(1)),
    ("sqrt", Func::Sqrt, Some(1)),
    ("exp", Func::Exp, Some(1)),
    ("log", Func::Log, Some(1)),
    ("log10", Func::Log10, Some(1)),
    ("floor", Func::Floor, Some(1)),
    ("ceil", Func::Ceil, Some(1)),
    ("round", Func::Round, Some(1)),
    ("min", Func::Min, None),
    ("max", Func::Max, None),
    ("clamp", Func::Clamp, Some(3)),
    ("pow", Func::Pow, Some(2)),
];

impl Func {
    fn name(self) -> &'static str {
        FUNCS
            .iter()
            .find(|(_, f, _)| *f == self)
            .map_or("?", |(n, _, _)| n)
    }
}

fn is_true(v: f64) -> bool {
    v != 0.0 && !v.is_nan()
}

/// NumPy's `mod`: the remainder with the divisor's sign.
fn floored_mod(a: f64, b: f64) -> f64 {
    let r = a % b;
    if r != 0.0 && (r < 0.0) != (b < 0.0) {
        r + b
    } else {
        r
    }
}

/// NumPy's `minimum`/`maximum`: NaN if either is NaN.
fn nan_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// A parsed, validated program: one expression per output band.
#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    outputs: Vec<Expr>,
}

/// Why an expression was refused.
#[derive(Debug, Clone, PartialEq)]
pub struct ExprError {
    pub kind: ExprErrorKind,
    /// 1-based column (in characters) of the whole input.
    pub column: usize,
    /// 1-based index of the `;`-separated expression.
    pub output: usize,
}

/// What is wrong with an expression.
#[derive(Debug, Clone, PartialEq)]
pub enum ExprErrorKind {
    /// Nothing to evaluate (an empty input or an empty expression between `;`).
    Empty,
    UnexpectedChar(char),
    UnexpectedToken(String),
    UnexpectedEnd,
    UnknownName(String),
    UnknownFunction(String),
    WrongArity {
        function: String,
        expected: String,
        found: usize,
    },
    /// `b0`: bands are numbered from 1.
    BandZero,
    /// `a < b < c`.
    ChainedComparison,
    BadNumber(String),
    UnbalancedParens,
}

impl ExprError {
    /// A stable kebab-case name of the fault.
    pub fn reason(&self) -> &'static str {
        match self.kind {
            ExprErrorKind::Empty => "empty-expression",
            ExprErrorKind::UnexpectedChar(_) => "unexpected-character",
            ExprErrorKind::UnexpectedToken(_) => "unexpected-token",
            ExprErrorKind::UnexpectedEnd => "unexpected-end",
            ExprErrorKind::UnknownName(_) => "unknown-name",
            ExprErrorKind::UnknownFunction(_) => "unknown-function",
            ExprErrorKind::WrongArity { .. } => "wrong-arity",
            ExprErrorKind::BandZero => "band-zero",
            ExprErrorKind::ChainedComparison => "chained-comparison",
            ExprErrorKind::BadNumber(_) => "bad-number",
            ExprErrorKind::UnbalancedParens => "unbalanced-parentheses",
        }
    }
}

impl fmt::Display for ExprError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "expression {}, column {}: ", self.output, self.column)?;
        match &self.kind {
            ExprErrorKind::Empty => f.write_str("nothing to compute (an empty expression)"),
            ExprErrorKind::UnexpectedChar(c) => write!(f, "unexpected character `{c}`"),
            ExprErrorKind::UnexpectedToken(t) => write!(f, "unexpected `{t}`"),
            ExprErrorKind::UnexpectedEnd => f.write_str("the expression ends too early"),
            ExprErrorKind::UnknownName(n) => write!(
                f,
                "unknown name `{n}` (bands are b1, b2, …; constants pi and e)"
            ),
            ExprErrorKind::UnknownFunction(n) => {
                let names: Vec<&str> = FUNCS.iter().map(|(n, _, _)| *n).collect();
                write!(
                    f,
                    "unknown function `{n}` (functions: {})",
                    names.join(", ")
                )
            }
            ExprErrorKind::WrongArity {
                function,
                expected,
                found,
            } => write!(
                f,
                "`{function}` takes {expected} argument(s), {found} given"
            ),
            ExprErrorKind::BandZero => f.write_str("bands are numbered from 1 (b1 is the first)"),
            ExprErrorKind::ChainedComparison => f.write_str(
                "comparisons do not chain: write `a < b && b < c` instead of `a < b < c`",
            ),
            ExprErrorKind::BadNumber(n) => write!(f, "`{n}` is not a number"),
            ExprErrorKind::UnbalancedParens => f.write_str("a `(` is never closed"),
        }
    }
}

impl std::error::Error for ExprError {}

impl Program {
    /// Parse and validate `;`-separated expressions.
    pub fn parse(src: &str) -> Result<Program, ExprError> {
        parse::program(src).map(|outputs| Program { outputs })
    }

    /// The program's canonical text (spelling and spacing normalised, binary operations fully
    /// parenthesised, outputs joined by `; `): the recipe's fingerprint. Parsing it gives the
    /// same program.
    pub fn canonical(&self) -> String {
        self.outputs
            .iter()
            .map(canonical)
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Number of outputs.
    pub fn outputs(&self) -> usize {
        self.outputs.len()
    }

    /// The distinct 1-based bands the whole program reads, ascending.
    pub fn bands(&self) -> Vec<u32> {
        let mut v = Vec::new();
        for e in &self.outputs {
            collect_bands(e, &mut v);
        }
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The distinct bands output `i` reads, ascending.
    pub fn output_bands(&self, i: usize) -> Vec<u32> {
        let mut v = Vec::new();
        collect_bands(&self.outputs[i], &mut v);
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The highest band referenced (0 if none).
    pub fn max_band(&self) -> u32 {
        self.bands().last().copied().unwrap_or(0)
    }

    /// Evaluate output `i` over `n` pixels; `band(b)` gives the `n` samples of band `b` for
    /// every `b` in [`Program::output_bands`].
    pub fn eval<'a>(&self, i: usize, n: usize, band: &dyn Fn(u32) -> &'a [f64]) -> Vec<f64> {
        eval(&self.outputs[i], n, band)
    }
}

fn collect_bands(e: &Expr, out: &mut Vec<u32>) {
    match e {
        Expr::Num(_) => {}
        Expr::Band(b) => out.push(*b),
        Expr::Unary(_, a) => collect_bands(a, out),
        Expr::Binary(_, a, b) => {
            collect_bands(a, out);
            collect_bands(b, out);
        }
        Expr::Call(_, args) => args.iter().for_each(|a| collect_bands(a, out)),
    }
}

fn canonical(e: &Expr) -> String {
    match e {
        Expr::Num(v) => {
            let s = format!("{v:?}");
            if *v < 0.0 { format!("({s})") } else { s }
        }
        Expr::Band(b) => format!("b{b}"),
        Expr::Unary(op, a) => {
            let sym = match op {
                Un::Neg => "-",
                Un::Plus => "+",
                Un::Not => "!",
            };
            format!("({sym}{})", canonical(a))
        }
        Expr::Binary(op, a, b) => format!("({} {} {})", canonical(a), op.symbol(), canonical(b)),
        Expr::Call(f, args) => format!(
            "{}({})",
            f.name(),
            args.iter().map(canonical).collect::<Vec<_>>().join(", ")
        ),
    }
}

fn map1(a: Vec<f64>, f: impl Fn(f64) -> f64) -> Vec<f64> {
    let mut a = a;
    a.iter_mut().for_each(|v| *v = f(*v));
    a
}

fn map2(a: Vec<f64>, b: &[f64], f: impl Fn(f64, f64) -> f64) -> Vec<f64> {
    let mut a = a;
    a.iter_mut().zip(b).for_each(|(x, &y)| *x = f(*x, y));
    a
}

fn eval<'a>(e: &Expr, n: usize, band: &dyn Fn(u32) -> &'a [f64]) -> Vec<f64> {
    match e {
        Expr::Num(v) => vec![*v; n],
        Expr::Band(b) => band(*b)[..n].to_vec(),
        Expr::Unary(op, a) => {
            let a = eval(a, n, band);
            match op {
                Un::Neg => map1(a, |v| -v),
                Un::Plus => a,
                Un::Not => map1(a, |v| if is_true(v) { 0.0 } else { 1.0 }),
            }
        }
        Expr::Binary(op, a, b) => {
            let a = eval(a, n, band);
            let b = eval(b, n, band);
            let op = *op;
            map2(a, &b, |x, y| op.apply(x, y))
        }
        Expr::Call(f, args) => {
            let mut vals = args.iter().map(|a| eval(a, n, band));
            let first = vals.next().expect("every function takes an argument");
            match f {
                Func::Where => {
                    let a = vals.next().expect("arity checked");
                    let b = vals.next().expect("arity checked");
                    let mut out = first;
                    for ((c, x), y) in out.iter_mut().zip(a).zip(b) {
                        *c = if is_true(*c) { x } else { y };
                    }
                    out
                }
                Func::Abs => map1(first, f64::abs),
                Func::Sqrt => map1(first, f64::sqrt),
                Func::Exp => map1(first, f64::exp),
                Func::Log => map1(first, f64::ln),
                Func::Log10 => map1(first, f64::log10),
                Func::Floor => map1(first, f64::floor),
                Func::Ceil => map1(first, f64::ceil),
                Func::Round => map1(first, f64::round_ties_even),
                Func::Min => vals.fold(first, |acc, v| map2(acc, &v, nan_min)),
                Func::Max => vals.fold(first, |acc, v| map2(acc, &v, nan_max)),
                Func::Clamp => {
                    let lo = vals.next().expect("arity checked");
                    let hi = vals.next().expect("arity checked");
                    let out = map2(first, &lo, nan_max);
                    map2(out, &hi, nan_min)
                }
                Func::Pow => {
                    let b = vals.next().expect("arity checked");
                    map2(first, &b, f64::powf)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
