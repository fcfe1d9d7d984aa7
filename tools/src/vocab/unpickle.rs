//! A pickle read as data, for objects `pytorch-reader` keeps opaque: the original code's corpus
//! (`data_utils.Corpus`) and its `Vocab` (`utils.vocabulary.Vocab`) are plain classes whose
//! attributes come in a `BUILD`, which this reader keeps as the object's [`Value::Object`] state.
//!
//! Only the classes named in `ALLOWED` may be built; anything else is an error, and nothing in the
//! file is ever run. Persistent ids (tensor storages) become [`Value::Opaque`]: their bytes are
//! not read. Every value made counts against a budget tied to the pickle's length, so memo
//! copies cannot blow up.

use std::collections::HashMap;
use std::io::Read;

use anyhow::{anyhow, bail, Context, Result};

/// Classes a pickle may name: the corpus and vocabulary of the original code, the containers
/// they use, and what `torch.save` writes around tensors (kept opaque).
const ALLOWED: &[(&str, &str)] = &[
    ("data_utils", "Corpus"),
    ("utils.vocabulary", "Vocab"),
    ("vocabulary", "Vocab"),
    ("collections", "OrderedDict"),
    ("collections", "Counter"),
    ("builtins", "set"),
    ("__builtin__", "set"),
    ("torch._utils", "_rebuild_tensor_v2"),
    ("torch._utils", "_rebuild_tensor"),
    ("torch", "LongStorage"),
    ("torch", "IntStorage"),
    ("torch", "FloatStorage"),
    // The TensorFlow code's `cache.pkl` (`pickle.dump(corpus, protocol=2)`): its token arrays
    // are NumPy arrays (kept opaque, never built), and Python 3 writes their bytes through
    // `_codecs.encode`.
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
];

/// A pickled value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `None`.
    None,
    /// A bool.
    Bool(bool),
    /// An int that fits an i64.
    Int(i64),
    /// A float.
    Float(f64),
    /// A str.
    Str(String),
    /// bytes.
    Bytes(Vec<u8>),
    /// A list, tuple or set.
    List(Vec<Value>),
    /// A dict (keys as text; int keys written in decimal).
    Dict(Vec<(String, Value)>),
    /// A class named by `GLOBAL`.
    Class(String),
    /// An instance of a class, with the state its `BUILD` gave (a dict of attributes).
    Object(String, Box<Value>),
    /// Something not read: a tensor or storage, an int too wide.
    Opaque(String),
}

impl Value {
    fn nodes(&self) -> usize {
        match self {
            Value::List(items) => 1 + items.iter().map(Value::nodes).sum::<usize>(),
            Value::Dict(items) => 1 + items.iter().map(|(k, v)| k.len() / 16 + v.nodes()).sum::<usize>(),
            Value::Object(_, state) => 1 + state.nodes(),
            Value::Str(s) => 1 + s.len() / 16,
            Value::Bytes(b) => 1 + b.len() / 16,
            _ => 1,
        }
    }

    /// The attribute or key `name` of a dict or an object's state.
    pub fn get(&self, name: &str) -> Option<&Value> {
        match self {
            Value::Dict(items) => items.iter().find(|(k, _)| k == name).map(|(_, v)| v),
            Value::Object(_, state) => state.get(name),
            _ => None,
        }
    }
}

/// One stack entry: a value or a MARK.
enum Slot {
    Mark,
    Value(Value),
}

struct Machine {
    stack: Vec<Slot>,
    memo: HashMap<u32, Value>,
    budget: usize,
}

impl Machine {
    fn charge(&mut self, value: &Value) -> Result<()> {
        let nodes = value.nodes();
        self.budget = self
            .budget
            .checked_sub(nodes)
            .ok_or_else(|| anyhow!("the pickle builds more values than its length allows"))?;
        Ok(())
    }

    fn push(&mut self, value: Value) -> Result<()> {
        self.charge(&value)?;
        self.stack.push(Slot::Value(value));
        Ok(())
    }

    fn pop(&mut self) -> Result<Value> {
        match self.stack.pop() {
            Some(Slot::Value(v)) => Ok(v),
            Some(Slot::Mark) => bail!("a MARK where a value was expected"),
            None => bail!("the pickle's stack is empty"),
        }
    }

    fn top(&mut self) -> Result<&mut Value> {
        match self.stack.last_mut() {
            Some(Slot::Value(v)) => Ok(v),
            _ => bail!("no value on the pickle's stack"),
        }
    }

    fn pop_mark(&mut self) -> Result<Vec<Value>> {
        let at = self
            .stack
            .iter()
            .rposition(|s| matches!(s, Slot::Mark))
            .ok_or_else(|| anyhow!("no MARK on the pickle's stack"))?;
        let items = self
            .stack
            .drain(at + 1..)
            .map(|s| match s {
                Slot::Value(v) => v,
                Slot::Mark => Value::None,
            })
            .collect();
        self.stack.pop();
        Ok(items)
    }
}

fn key_text(key: Value) -> Result<String> {
    match key {
        Value::Str(s) => Ok(s),
        Value::Int(i) => Ok(i.to_string()),
        other => bail!("a dict key that is not text: {other:?}"),
    }
}

fn set_items(target: &mut Value, items: Vec<Value>) -> Result<()> {
    let Value::Dict(dict) = target else {
        bail!("SETITEMS on something other than a dict");
    };
    if !items.len().is_multiple_of(2) {
        bail!("SETITEMS with an odd number of items");
    }
    let mut items = items.into_iter();
    while let (Some(k), Some(v)) = (items.next(), items.next()) {
        let k = key_text(k)?;
        match dict.iter_mut().find(|(existing, _)| *existing == k) {
            Some(slot) => slot.1 = v,
            None => dict.push((k, v)),
        }
    }
    Ok(())
}

fn read_n<const N: usize>(r: &mut impl Read) -> Result<[u8; N]> {
    let mut bytes = [0u8; N];
    r.read_exact(&mut bytes).context("the pickle ends early")?;
    Ok(bytes)
}

fn read_vec(r: &mut impl Read, len: u64, limit: usize) -> Result<Vec<u8>> {
    let len = usize::try_from(len)
        .ok()
        .filter(|&n| n <= limit)
        .ok_or_else(|| anyhow!("the pickle declares a string of {len} bytes, more than it holds"))?;
    let mut bytes = vec![0u8; len];
    r.read_exact(&mut bytes).context("the pickle ends early")?;
    Ok(bytes)
}

fn read_line(r: &mut impl Read, limit: usize) -> Result<String> {
    let mut line = Vec::new();
    loop {
        let [b] = read_n::<1>(r)?;
        if b == b'\n' {
            break;
        }
        line.push(b);
        if line.len() > limit {
            bail!("a pickle text line is too long");
        }
    }
    String::from_utf8(line).context("a pickle text line is not UTF-8")
}

fn text(bytes: Vec<u8>) -> Result<Value> {
    String::from_utf8(bytes)
        .map(Value::Str)
        .context("a pickled str is not UTF-8")
}

/// Reads one pickle from `r` (stopping after its STOP), `limit` being the bytes it may span:
/// the file's length.
pub fn read(r: &mut impl Read, limit: usize) -> Result<Value> {
    let mut m = Machine {
        stack: Vec::new(),
        memo: HashMap::new(),
        budget: limit.saturating_mul(4).max(1024),
    };
    loop {
        let [op] = read_n::<1>(r)?;
        match op {
            0x80 => {
                read_n::<1>(r)?; // PROTO
            }
            0x95 => {
                read_n::<8>(r)?; // FRAME
            }
            b'.' => return m.pop(), // STOP
            b'(' => m.stack.push(Slot::Mark),
            b'N' => m.push(Value::None)?,
            0x88 => m.push(Value::Bool(true))?,
            0x89 => m.push(Value::Bool(false))?,
            b'J' => m.push(Value::Int(i64::from(i32::from_le_bytes(read_n(r)?))))?,
            b'K' => m.push(Value::Int(i64::from(read_n::<1>(r)?[0])))?,
            b'M' => m.push(Value::Int(i64::from(u16::from_le_bytes(read_n(r)?))))?,
            0x8a => {
                // LONG1
                let [n] = read_n::<1>(r)?;
                let bytes = read_vec(r, u64::from(n), limit)?;
                let value = match bytes.len() {
                    0 => Value::Int(0),
                    1..=8 => {
                        let negative = bytes[bytes.len() - 1] & 0x80 != 0;
                        let mut word = [if negative { 0xff } else { 0 }; 8];
                        word[..bytes.len()].copy_from_slice(&bytes);
                        Value::Int(i64::from_le_bytes(word))
                    }
                    _ => Value::Opaque("int".into()),
                };
                m.push(value)?;
            }
            b'G' => m.push(Value::Float(f64::from_be_bytes(read_n(r)?)))?,
            b'X' => {
                let len = u32::from_le_bytes(read_n(r)?);
                m.push(text(read_vec(r, u64::from(len), limit)?)?)?;
            }
            0x8c => {
                let [len] = read_n::<1>(r)?;
                m.push(text(read_vec(r, u64::from(len), limit)?)?)?;
            }
            0x8d => {
                let len = u64::from_le_bytes(read_n(r)?);
                m.push(text(read_vec(r, len, limit)?)?)?;
            }
            b'C' => {
                let [len] = read_n::<1>(r)?;
                m.push(Value::Bytes(read_vec(r, u64::from(len), limit)?))?;
            }
            b'B' => {
                let len = u32::from_le_bytes(read_n(r)?);
                m.push(Value::Bytes(read_vec(r, u64::from(len), limit)?))?;
            }
            b'U' => {
                // SHORT_BINSTRING (protocol 2 str of Python 2): read as text, or bytes when it
                // is not UTF-8 (a small NumPy array's data)
                let [len] = read_n::<1>(r)?;
                let bytes = read_vec(r, u64::from(len), limit)?;
                m.push(match String::from_utf8(bytes) {
                    Ok(s) => Value::Str(s),
                    Err(e) => Value::Bytes(e.into_bytes()),
                })?;
            }
            b'T' => {
                // BINSTRING (a longer Python 2 str): text, or bytes when it is not UTF-8 (a
                // NumPy array's data)
                let len = u32::from_le_bytes(read_n(r)?);
                let bytes = read_vec(r, u64::from(len), limit)?;
                m.push(match String::from_utf8(bytes) {
                    Ok(s) => Value::Str(s),
                    Err(e) => Value::Bytes(e.into_bytes()),
                })?;
            }
            b')' => m.push(Value::List(Vec::new()))?,
            b']' => m.push(Value::List(Vec::new()))?,
            0x8f => m.push(Value::List(Vec::new()))?, // EMPTY_SET
            b'}' => m.push(Value::Dict(Vec::new()))?,
            0x85..=0x87 => {
                let n = usize::from(op - 0x84);
                if m.stack.len() < n {
                    bail!("TUPLE{n} on a short stack");
                }
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(m.pop()?);
                }
                items.reverse();
                m.stack.push(Slot::Value(Value::List(items)));
            }
            b't' | b'l' | 0x91 => {
                // TUPLE, LIST, FROZENSET
                let items = m.pop_mark()?;
                m.stack.push(Slot::Value(Value::List(items)));
            }
            b'd' => {
                let items = m.pop_mark()?;
                let mut dict = Value::Dict(Vec::new());
                set_items(&mut dict, items)?;
                m.stack.push(Slot::Value(dict));
            }
            b'a' => {
                let item = m.pop()?;
                match m.top()? {
                    Value::List(items) => items.push(item),
                    _ => bail!("APPEND to something other than a list"),
                }
            }
            b'e' | 0x90 => {
                // APPENDS, ADDITEMS
                let items = m.pop_mark()?;
                match m.top()? {
                    Value::List(list) => list.extend(items),
                    _ => bail!("APPENDS to something other than a list"),
                }
            }
            b's' => {
                let value = m.pop()?;
                let key = m.pop()?;
                set_items(m.top()?, vec![key, value])?;
            }
            b'u' => {
                let items = m.pop_mark()?;
                set_items(m.top()?, items)?;
            }
            b'q' => {
                let [i] = read_n::<1>(r)?;
                memo_put(&mut m, u32::from(i))?;
            }
            b'r' => {
                let i = u32::from_le_bytes(read_n(r)?);
                memo_put(&mut m, i)?;
            }
            0x94 => {
                let i = m.memo.len() as u32;
                memo_put(&mut m, i)?;
            }
            b'h' => {
                let [i] = read_n::<1>(r)?;
                memo_get(&mut m, u32::from(i))?;
            }
            b'j' => {
                let i = u32::from_le_bytes(read_n(r)?);
                memo_get(&mut m, i)?;
            }
            b'c' => {
                let module = read_line(r, 256)?;
                let name = read_line(r, 256)?;
                m.push(class(&module, &name)?)?;
            }
            0x93 => {
                let name = m.pop()?;
                let module = m.pop()?;
                let (Value::Str(module), Value::Str(name)) = (module, name) else {
                    bail!("STACK_GLOBAL expects two strings");
                };
                m.push(class(&module, &name)?)?;
            }
            b'Q' => {
                // BINPERSID: a storage; its bytes are not read
                m.pop()?;
                m.push(Value::Opaque("storage".into()))?;
            }
            b'R' | 0x81 => {
                // REDUCE, NEWOBJ
                let args = m.pop()?;
                let callable = m.pop()?;
                let Value::Class(name) = callable else {
                    bail!("a call of something other than a class");
                };
                let value = match name.as_str() {
                    "collections.OrderedDict" => Value::Dict(Vec::new()),
                    "collections.Counter"
                    | "torch._utils._rebuild_tensor_v2"
                    | "torch._utils._rebuild_tensor"
                    | "numpy.core.multiarray._reconstruct"
                    | "numpy._core.multiarray._reconstruct"
                    | "numpy.dtype"
                    | "_codecs.encode" => Value::Opaque(name),
                    "builtins.set" | "__builtin__.set" => match args {
                        Value::List(mut a) if a.len() == 1 => a.pop().unwrap_or(Value::None),
                        _ => Value::List(Vec::new()),
                    },
                    _ => Value::Object(name, Box::new(Value::None)),
                };
                m.push(value)?;
            }
            b'b' => {
                let state = m.pop()?;
                match m.top()? {
                    Value::Object(_, slot) => **slot = state,
                    Value::Opaque(_) => {}
                    _ => bail!("BUILD on something other than an object"),
                }
            }
            other => bail!("pickle opcode {other:#04x} is not read here"),
        }
    }
}

fn memo_put(m: &mut Machine, i: u32) -> Result<()> {
    let value = match m.stack.last() {
        Some(Slot::Value(v)) => v.clone(),
        _ => bail!("memoize with no value"),
    };
    m.charge(&value)?;
    m.memo.insert(i, value);
    Ok(())
}

fn memo_get(m: &mut Machine, i: u32) -> Result<()> {
    let value = m
        .memo
        .get(&i)
        .cloned()
        .ok_or_else(|| anyhow!("memo entry {i} is not set"))?;
    m.push(value)
}

fn class(module: &str, name: &str) -> Result<Value> {
    if ALLOWED.contains(&(module, name)) {
        Ok(Value::Class(format!("{module}.{name}")))
    } else {
        bail!("the pickle names {module}.{name}, which is not read (only the original code's corpus and vocabulary)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Result<Value> {
        read(&mut &bytes[..], bytes.len())
    }

    #[test]
    fn plain_data_and_allowed_classes_read_and_others_are_refused() {
        // {'a': [1, 'x'], 'b': True} at protocol 2
        let data =
            b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01]q\x02(K\x01X\x01\x00\x00\x00xeX\x01\x00\x00\x00b\x88u.";
        let value = parse(data).unwrap();
        assert_eq!(value.get("b"), Some(&Value::Bool(true)));
        assert_eq!(
            value.get("a"),
            Some(&Value::List(vec![Value::Int(1), Value::Str("x".into())]))
        );
        // os.system('true'), the way a hostile pickle would run a command
        let hostile = b"cos\nsystem\n(X\x04\x00\x00\x00truetR.";
        let error = parse(hostile).unwrap_err().to_string();
        assert!(error.contains("os.system"), "{error}");
        // A memo copied over and over runs out of budget instead of memory.
        let mut bomb = b"\x80\x02]q\x00".to_vec();
        for _ in 0..40 {
            bomb.extend_from_slice(b"h\x00h\x00\x86q\x00");
        }
        bomb.push(b'.');
        assert!(parse(&bomb).is_err());
        for cut in 0..data.len() {
            assert!(parse(&data[..cut]).is_err());
        }
    }
}
