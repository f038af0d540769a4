//! Tokens and a precedence-climbing parser.

use crate::{Bin, Expr, ExprError, ExprErrorKind, FUNCS, Un};

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(f64),
    Ident(String),
    Op(&'static str),
    LParen,
    RParen,
    Comma,
}

impl Tok {
    fn text(&self) -> String {
        match self {
            Tok::Num(v) => v.to_string(),
            Tok::Ident(s) => s.clone(),
            Tok::Op(s) => (*s).to_owned(),
            Tok::LParen => "(".into(),
            Tok::RParen => ")".into(),
            Tok::Comma => ",".into(),
        }
    }
}

/// Operators, longest first so that `<=` wins over `<`.
const OPS: [&str; 17] = [
    "**", "||", "&&", "==", "!=", "<=", ">=", "<", ">", "+", "-", "*", "/", "%", "^", "!", "=",
];

struct Parser {
    toks: Vec<(Tok, usize)>,
    pos: usize,
    /// Column just past the expression, for errors at its end.
    end: usize,
    output: usize,
}

/// Parse the `;`-separated expressions of `src`.
pub(crate) fn program(src: &str) -> Result<Vec<Expr>, ExprError> {
    let chars: Vec<char> = src.chars().collect();
    let mut parts = Vec::new();
    let mut start = 0;
    for (i, c) in chars.iter().enumerate() {
        if *c == ';' {
            parts.push((start, i));
            start = i + 1;
        }
    }
    parts.push((start, chars.len()));
    // A trailing `;` (and blanks after it) is allowed.
    if parts.len() > 1
        && let Some(&(s, e)) = parts.last()
        && chars[s..e].iter().all(|c| c.is_whitespace())
    {
        parts.pop();
    }
    let mut out = Vec::with_capacity(parts.len());
    for (k, (s, e)) in parts.into_iter().enumerate() {
        let output = k + 1;
        let toks = lex(&chars[s..e], s, output)?;
        if toks.is_empty() {
            return Err(ExprError {
                kind: ExprErrorKind::Empty,
                column: s + 1,
                output,
            });
        }
        let mut p = Parser {
            toks,
            pos: 0,
            end: e + 1,
            output,
        };
        let expr = p.expr(0)?;
        if let Some((t, col)) = p.toks.get(p.pos) {
            let kind = if *t == Tok::RParen {
                ExprErrorKind::UnexpectedToken(")".into())
            } else {
                ExprErrorKind::UnexpectedToken(t.text())
            };
            return Err(ExprError {
                kind,
                column: *col,
                output,
            });
        }
        out.push(expr);
    }
    Ok(out)
}

fn lex(chars: &[char], offset: usize, output: usize) -> Result<Vec<(Tok, usize)>, ExprError> {
    let mut toks = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let col = offset + i + 1;
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit()
            || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                i += 1;
            }
            if i < chars.len() && (chars[i] == 'e' || chars[i] == 'E') {
                let mut j = i + 1;
                if j < chars.len() && (chars[j] == '+' || chars[j] == '-') {
                    j += 1;
                }
                if j < chars.len() && chars[j].is_ascii_digit() {
                    i = j;
                    while i < chars.len() && chars[i].is_ascii_digit() {
                        i += 1;
                    }
                }
            }
            let text: String = chars[start..i].iter().collect();
            let v: f64 = text.parse().map_err(|_| ExprError {
                kind: ExprErrorKind::BadNumber(text.clone()),
                column: col,
                output,
            })?;
            toks.push((Tok::Num(v), col));
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            toks.push((Tok::Ident(chars[start..i].iter().collect()), col));
        } else if c == '(' {
            toks.push((Tok::LParen, col));
            i += 1;
        } else if c == ')' {
            toks.push((Tok::RParen, col));
            i += 1;
        } else if c == ',' {
            toks.push((Tok::Comma, col));
            i += 1;
        } else if let Some(op) = OPS.iter().find(|op| {
            let n = op.chars().count();
            i + n <= chars.len() && chars[i..i + n].iter().copied().eq(op.chars())
        }) {
            if *op == "=" {
                return Err(ExprError {
                    kind: ExprErrorKind::UnexpectedToken("= (compare with ==)".into()),
                    column: col,
                    output,
                });
            }
            toks.push((Tok::Op(op), col));
            i += op.len();
        } else {
            return Err(ExprError {
                kind: ExprErrorKind::UnexpectedChar(c),
                column: col,
                output,
            });
        }
    }
    Ok(toks)
}

/// Binary operators by precedence level (higher binds tighter); `^` is handled apart.
fn binary(t: &Tok) -> Option<(Bin, u8)> {
    let Tok::Op(s) = t else {
        return match t {
            Tok::Ident(w) if w.eq_ignore_ascii_case("or") => Some((Bin::Or, 1)),
            Tok::Ident(w) if w.eq_ignore_ascii_case("and") => Some((Bin::And, 2)),
            _ => None,
        };
    };
    Some(match *s {
        "||" => (Bin::Or, 1),
        "&&" => (Bin::And, 2),
        "==" => (Bin::Eq, 3),
        "!=" => (Bin::Ne, 3),
        "<" => (Bin::Lt, 3),
        "<=" => (Bin::Le, 3),
        ">" => (Bin::Gt, 3),
        ">=" => (Bin::Ge, 3),
        "+" => (Bin::Add, 4),
        "-" => (Bin::Sub, 4),
        "*" => (Bin::Mul, 5),
        "/" => (Bin::Div, 5),
        "%" => (Bin::Mod, 5),
        _ => return None,
    })
}

const COMPARISON: u8 = 3;

impl Parser {
    fn err(&self, kind: ExprErrorKind, column: usize) -> ExprError {
        ExprError {
            kind,
            column,
            output: self.output,
        }
    }

    fn peek(&self) -> Option<&(Tok, usize)> {
        self.toks.get(self.pos)
    }

    fn next(&mut self) -> Result<(Tok, usize), ExprError> {
        let t = self
            .toks
            .get(self.pos)
            .cloned()
            .ok_or_else(|| self.err(ExprErrorKind::UnexpectedEnd, self.end))?;
        self.pos += 1;
        Ok(t)
    }

    /// Binary operations of precedence above `min`.
    fn expr(&mut self, min: u8) -> Result<Expr, ExprError> {
        let mut lhs = self.unary()?;
        let mut last_comparison = false;
        while let Some((t, col)) = self.peek().cloned() {
            let Some((op, prec)) = binary(&t) else { break };
            if prec <= min {
                break;
            }
            if prec == COMPARISON && last_comparison {
                return Err(self.err(ExprErrorKind::ChainedComparison, col));
            }
            self.pos += 1;
            let rhs = self.expr(prec)?;
            last_comparison = prec == COMPARISON;
            lhs = Expr::Binary(op, Box::new(lhs), Box::new(rhs));
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Expr, ExprError> {
        let op = match self.peek() {
            Some((Tok::Op("-"), _)) => Some(Un::Neg),
            Some((Tok::Op("+"), _)) => Some(Un::Plus),
            Some((Tok::Op("!"), _)) => Some(Un::Not),
            Some((Tok::Ident(w), _)) if w.eq_ignore_ascii_case("not") => Some(Un::Not),
            _ => None,
        };
        match op {
            Some(op) => {
                self.pos += 1;
                Ok(Expr::Unary(op, Box::new(self.unary()?)))
            }
            None => self.power(),
        }
    }

    /// `atom (^ unary)?`, right-associative: `2^3^2` is `2^(3^2)`, `2^-1` is allowed.
    fn power(&mut self) -> Result<Expr, ExprError> {
        let base = self.atom()?;
        if matches!(self.peek(), Some((Tok::Op("^" | "**"), _))) {
            self.pos += 1;
            let exp = self.unary()?;
            return Ok(Expr::Binary(Bin::Pow, Box::new(base), Box::new(exp)));
        }
        Ok(base)
    }

    fn atom(&mut self) -> Result<Expr, ExprError> {
        let (t, col) = self.next()?;
        match t {
            Tok::Num(v) => Ok(Expr::Num(v)),
            Tok::LParen => {
                let e = self.expr(0)?;
                match self.peek() {
                    Some((Tok::RParen, _)) => {
                        self.pos += 1;
                        Ok(e)
                    }
                    Some((t, c)) => Err(self.err(ExprErrorKind::UnexpectedToken(t.text()), *c)),
                    None => Err(self.err(ExprErrorKind::UnbalancedParens, col)),
                }
            }
            Tok::Ident(name) => {
                if matches!(self.peek(), Some((Tok::LParen, _))) {
                    return self.call(&name, col);
                }
                let lower = name.to_ascii_lowercase();
                if let Some(digits) = lower.strip_prefix('b')
                    && !digits.is_empty()
                    && digits.chars().all(|c| c.is_ascii_digit())
                {
                    let b: u32 = digits
                        .parse()
                        .map_err(|_| self.err(ExprErrorKind::BadNumber(name.clone()), col))?;
                    if b == 0 {
                        return Err(self.err(ExprErrorKind::BandZero, col));
                    }
                    return Ok(Expr::Band(b));
                }
                match lower.as_str() {
                    "pi" => Ok(Expr::Num(std::f64::consts::PI)),
                    "e" => Ok(Expr::Num(std::f64::consts::E)),
                    _ => Err(self.err(ExprErrorKind::UnknownName(name), col)),
                }
            }
            other => Err(self.err(ExprErrorKind::UnexpectedToken(other.text()), col)),
        }
    }

    fn call(&mut self, name: &str, col: usize) -> Result<Expr, ExprError> {
        let lower = name.to_ascii_lowercase();
        let Some(&(_, func, arity)) = FUNCS.iter().find(|(n, _, _)| *n == lower) else {
            return Err(self.err(ExprErrorKind::UnknownFunction(name.to_owned()), col));
        };
        self.pos += 1; // (
        let mut args = Vec::new();
        if matches!(self.peek(), Some((Tok::RParen, _))) {
            self.pos += 1;
        } else {
            loop {
                args.push(self.expr(0)?);
                match self.peek().cloned() {
                    Some((Tok::Comma, _)) => self.pos += 1,
                    Some((Tok::RParen, _)) => {
                        self.pos += 1;
                        break;
                    }
                    Some((t, c)) => {
                        return Err(self.err(ExprErrorKind::UnexpectedToken(t.text()), c));
                    }
                    None => return Err(self.err(ExprErrorKind::UnbalancedParens, col)),
                }
            }
        }
        let ok = match arity {
            Some(n) => args.len() == n,
            None => args.len() >= 2,
        };
        if !ok {
            return Err(self.err(
                ExprErrorKind::WrongArity {
                    function: lower,
                    expected: arity.map_or_else(|| "2 or more".to_owned(), |n| n.to_string()),
                    found: args.len(),
                },
                col,
            ));
        }
        Ok(Expr::Call(func, args))
    }
}
