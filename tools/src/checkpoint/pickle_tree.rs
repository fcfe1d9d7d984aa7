//! A pickle read as a tree of values, never run: the object tree `torch.save(model)` writes.
//!
//! `pytorch-reader` (behind [`super::torch_source`]) reads a pickled module as its
//! `state_dict()`, which is what the tensors need, but it keeps neither the classes nor the
//! attributes. The original training code's checkpoints carry their hyper-parameters only
//! there (`n_layer`, `d_model`, `cutoffs`, ...), so this module walks the same pickle once
//! more, as data: `GLOBAL` names a class (checked against an allow-list *before* anything
//! else happens, so a file naming any other class is refused at that point), `NEWOBJ` /
//! `REDUCE` record the class, `BUILD` records the state (the attributes), a persistent id
//! (a tensor storage) stays an opaque [`Value::Persistent`]. Nothing is ever called.
//!
//! Lists, dicts and objects are shared through the memo (`Rc`): a pickler memoizes an object
//! before filling it in, and tied parameters are one object reached twice, so both names
//! must see the same node.
//!
//! Only the binary opcodes of protocols 2 to 5 (what `torch.save` writes) are read; any
//! other is an error naming it and its offset.

use std::cell::RefCell;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::rc::Rc;

use anyhow::{anyhow, bail, Result};

/// Deepest nesting the tree walkers follow (a module tree is a few levels deep).
pub(crate) const MAX_DEPTH: usize = 64;

/// A value in the pickle.
#[derive(Clone, Debug)]
pub(crate) enum Value {
    None,
    Bool(bool),
    Int(i64),
    /// An integer too wide for `i64`, as its little-endian two's complement bytes.
    BigInt(Vec<u8>),
    Float(f64),
    Str(String),
    /// A `bytes` value (its contents are of no use here).
    Bytes,
    Tuple(Rc<Vec<Value>>),
    List(Rc<RefCell<Vec<Value>>>),
    /// A dict (or `OrderedDict`), in insertion order.
    Dict(Rc<RefCell<Vec<(Value, Value)>>>),
    /// A class or function named by `GLOBAL` / `STACK_GLOBAL`.
    Global(Rc<(String, String)>),
    /// `cls(*args)` (`NEWOBJ`) or `callable(*args)` (`REDUCE`), then `BUILD` state; the
    /// arguments are not kept (a module's are empty, a tensor's are read elsewhere).
    Object(Rc<RefCell<Object>>),
    /// A persistent id: in a PyTorch file, a reference to a tensor storage.
    Storage(Rc<StorageRef>),
    /// `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)` (or a parameter
    /// built on one): a view of a storage, whose bytes are not read here.
    Tensor(Rc<TensorRef>),
}

/// A storage a persistent id names: `("storage", torch.FloatStorage, key, location, numel)`.
#[derive(Debug)]
pub(crate) struct StorageRef {
    /// The storage class's name (`FloatStorage`, `HalfStorage`, ...).
    pub class: String,
    /// Its key in the file (a ZIP entry `data/KEY`, or a legacy stream's storage key).
    pub key: String,
    /// Its element count.
    pub numel: u64,
}

/// A tensor on a storage.
#[derive(Debug)]
pub(crate) struct TensorRef {
    pub storage: Rc<StorageRef>,
    /// Offset of the first element, in elements.
    pub offset: u64,
    pub shape: Vec<usize>,
    pub stride: Vec<usize>,
}

/// An object the pickle constructs, recorded rather than constructed.
#[derive(Debug)]
pub(crate) struct Object {
    /// `module.name` of the class (or the function `REDUCE` calls).
    pub class: String,
    /// What `BUILD` gave it (`__dict__` for a module), if anything.
    pub state: Option<Value>,
}

/// Values nest as deep as a file makes them (a list in a list in a list ...): dropping one
/// takes its children apart one level at a time, on the heap, not by recursion.
impl Drop for Value {
    fn drop(&mut self) {
        let mut pending = Vec::new();
        self.take_children(&mut pending);
        while let Some(mut value) = pending.pop() {
            value.take_children(&mut pending);
        }
    }
}

impl Value {
    /// Moves this value's children into `out` when no other reference shares them.
    fn take_children(&mut self, out: &mut Vec<Value>) {
        match self {
            Value::Tuple(items) => {
                if let Some(items) = Rc::get_mut(items) {
                    out.append(items);
                }
            }
            Value::List(items) => {
                if let Some(items) = Rc::get_mut(items) {
                    out.append(items.get_mut());
                }
            }
            Value::Dict(items) => {
                if let Some(items) = Rc::get_mut(items) {
                    for (key, value) in items.get_mut().drain(..) {
                        out.push(key);
                        out.push(value);
                    }
                }
            }
            Value::Object(object) => {
                if let Some(object) = Rc::get_mut(object) {
                    out.extend(object.get_mut().state.take());
                }
            }
            _ => {}
        }
    }

    /// Python's name for the value's type, for error messages.
    pub(crate) fn type_name(&self) -> String {
        match self {
            Value::None => "None".into(),
            Value::Bool(_) => "bool".into(),
            Value::Int(_) | Value::BigInt(_) => "int".into(),
            Value::Float(_) => "float".into(),
            Value::Str(_) => "str".into(),
            Value::Bytes => "bytes".into(),
            Value::Tuple(_) => "tuple".into(),
            Value::List(_) => "list".into(),
            Value::Dict(_) => "dict".into(),
            Value::Global(g) => format!("{}.{}", g.0, g.1),
            Value::Object(o) => o.borrow().class.clone(),
            Value::Storage(_) => "storage".into(),
            Value::Tensor(_) => "torch.Tensor".into(),
        }
    }

    /// The string, if the value is one.
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The items of a dict, if the value is one.
    pub(crate) fn dict_items(&self) -> Option<Vec<(Value, Value)>> {
        match self {
            Value::Dict(d) => Some(d.borrow().clone()),
            _ => None,
        }
    }
}

/// Reads one pickle from `data[start..]`; returns its value and the offset after `STOP`.
/// `allowed(module, name)` is asked about every class or function the pickle names; a
/// `false` stops the reading with an error naming it.
pub(crate) fn read_pickle(
    data: &[u8],
    start: usize,
    allowed: &dyn Fn(&str, &str) -> bool,
) -> Result<(Value, usize)> {
    let mut machine = Machine {
        data,
        pos: start,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: std::collections::HashMap::new(),
    };
    let result = machine.run(allowed);
    // A container put into itself (through the memo) is a cycle `Rc` never frees. Checkpoints
    // have none (tied weights are one object reached twice, not a loop), so a cycle is
    // refused, after every container the reading made is emptied to free it.
    let mut roots: Vec<Value> = machine.stack.drain(..).collect();
    roots.extend(machine.memo.drain().map(|(_, value)| value));
    roots.extend(result.as_ref().ok().cloned());
    if holds_cycle(&roots) {
        empty_containers(roots);
        result?;
        bail!("the pickle puts a list, dict or object inside itself (a reference cycle), which a checkpoint never does");
    }
    drop(roots);
    Ok((result?, machine.pos))
}

/// The address of a list's, tuple's, dict's or object's shared node: its identity.
fn container_id(value: &Value) -> Option<usize> {
    match value {
        Value::Tuple(items) => Some(Rc::as_ptr(items) as *const () as usize),
        Value::List(items) => Some(Rc::as_ptr(items) as *const () as usize),
        Value::Dict(items) => Some(Rc::as_ptr(items) as *const () as usize),
        Value::Object(object) => Some(Rc::as_ptr(object) as *const () as usize),
        _ => None,
    }
}

/// The values a container holds (shared, not moved).
fn children(value: &Value) -> Vec<Value> {
    match value {
        Value::Tuple(items) => items.to_vec(),
        Value::List(items) => items.borrow().clone(),
        Value::Dict(items) => items
            .borrow()
            .iter()
            .flat_map(|(k, v)| [k.clone(), v.clone()])
            .collect(),
        Value::Object(object) => object.borrow().state.iter().cloned().collect(),
        _ => Vec::new(),
    }
}

/// Whether a container reachable from `roots` reaches itself: a depth-first walk on the heap
/// (a pickle nests as deep as it likes), each container walked once.
fn holds_cycle(roots: &[Value]) -> bool {
    let mut finished = std::collections::HashSet::new();
    let mut on_path = std::collections::HashSet::new();
    for root in roots {
        let Some(root_id) = container_id(root) else {
            continue;
        };
        if finished.contains(&root_id) {
            continue;
        }
        on_path.insert(root_id);
        let mut path = vec![(root_id, children(root).into_iter())];
        while let Some((id, pending)) = path.last_mut() {
            let Some(child) = pending.next() else {
                on_path.remove(id);
                finished.insert(*id);
                path.pop();
                continue;
            };
            let Some(child_id) = container_id(&child) else {
                continue;
            };
            if on_path.contains(&child_id) {
                return true;
            }
            if !finished.contains(&child_id) {
                on_path.insert(child_id);
                path.push((child_id, children(&child).into_iter()));
            }
        }
    }
    false
}

/// Empties every list, dict and object reachable from `roots`, which frees them even in a
/// cycle (a tuple is made from values that already exist, so every cycle passes through one
/// of these).
fn empty_containers(roots: Vec<Value>) {
    let mut seen = std::collections::HashSet::new();
    let mut pending = roots;
    while let Some(value) = pending.pop() {
        let Some(id) = container_id(&value) else { continue };
        if !seen.insert(id) {
            continue;
        }
        match &value {
            Value::Tuple(items) => pending.extend(items.iter().cloned()),
            Value::List(items) => pending.append(&mut items.borrow_mut()),
            Value::Dict(items) => {
                for (key, item) in items.borrow_mut().drain(..) {
                    pending.push(key);
                    pending.push(item);
                }
            }
            Value::Object(object) => pending.extend(object.borrow_mut().state.take()),
            _ => {}
        }
    }
}

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: std::collections::HashMap<u32, Value>,
}

impl<'a> Machine<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.data.len())
            .ok_or_else(|| {
                anyhow!(
                    "the pickle ends early (at byte {} of {})",
                    self.pos,
                    self.data.len()
                )
            })?;
        let bytes = &self.data[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn le<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn len_u32(&mut self) -> Result<usize> {
        Ok(u32::from_le_bytes(self.le()?) as usize)
    }

    fn len_u64(&mut self) -> Result<usize> {
        usize::try_from(u64::from_le_bytes(self.le()?))
            .map_err(|_| anyhow!("a length in the pickle is too large"))
    }

    fn line(&mut self) -> Result<String> {
        let rest = &self.data[self.pos..];
        let Some(end) = rest.iter().position(|&b| b == b'\n') else {
            bail!("the pickle ends inside a text line (at byte {})", self.pos);
        };
        let text = String::from_utf8(rest[..end].to_vec())
            .map_err(|_| anyhow!("a name in the pickle is not UTF-8"))?;
        self.pos += end + 1;
        Ok(text)
    }

    fn text(&mut self, n: usize) -> Result<String> {
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| anyhow!("a string in the pickle is not UTF-8"))
    }

    fn pop(&mut self) -> Result<Value> {
        if self.marks.last().is_some_and(|&m| m >= self.stack.len()) {
            bail!("the pickle pops past a mark (at byte {})", self.pos);
        }
        self.stack
            .pop()
            .ok_or_else(|| anyhow!("the pickle pops an empty stack (at byte {})", self.pos))
    }

    fn top(&mut self) -> Result<&mut Value> {
        let pos = self.pos;
        self.stack
            .last_mut()
            .ok_or_else(|| anyhow!("the pickle needs a value on an empty stack (at byte {pos})"))
    }

    fn pop_mark(&mut self) -> Result<Vec<Value>> {
        let mark = self
            .marks
            .pop()
            .ok_or_else(|| anyhow!("the pickle has no mark to pop to (at byte {})", self.pos))?;
        Ok(self.stack.split_off(mark))
    }

    fn global(&mut self, module: String, name: String, allowed: &dyn Fn(&str, &str) -> bool) -> Result<()> {
        if !allowed(&module, &name) {
            bail!(
                "the checkpoint names the class `{module}.{name}`, which is not part of the original \
                 Transformer-XL training code's model (nothing from the file is run; it is refused)"
            );
        }
        self.stack.push(Value::Global(Rc::new((module, name))));
        Ok(())
    }

    fn memo_get(&mut self, index: u32) -> Result<()> {
        let value = self
            .memo
            .get(&index)
            .cloned()
            .ok_or_else(|| anyhow!("the pickle fetches memo entry {index}, which was never stored"))?;
        self.stack.push(value);
        Ok(())
    }

    fn memo_put(&mut self, index: u32) -> Result<()> {
        let value = self.top()?.clone();
        self.memo.insert(index, value);
        Ok(())
    }

    fn set_items(&mut self, items: Vec<Value>) -> Result<()> {
        if !items.len().is_multiple_of(2) {
            bail!("SETITEMS with an odd number of values");
        }
        let Value::Dict(dict) = self.top()? else {
            bail!("the pickle sets items on a value that is not a dict");
        };
        let mut dict = dict.borrow_mut();
        let mut items = items.into_iter();
        while let (Some(k), Some(v)) = (items.next(), items.next()) {
            dict.push((k, v));
        }
        Ok(())
    }

    fn append(&mut self, items: Vec<Value>) -> Result<()> {
        match self.top()? {
            Value::List(list) => list.borrow_mut().extend(items),
            _ => bail!("the pickle appends to a value that is not a list"),
        }
        Ok(())
    }

    fn construct(&mut self, callable: Value, args: Value) -> Result<Value> {
        let Value::Global(name) = &callable else {
            bail!(
                "the pickle calls a {}, not a named class or function",
                callable.type_name()
            );
        };
        let class = format!("{}.{}", name.0, name.1);
        // The containers are data: an OrderedDict's items follow as SETITEMS, a set's as
        // its argument.
        Ok(match class.as_str() {
            "collections.OrderedDict" => {
                let items = match &args {
                    Value::Tuple(t) if t.is_empty() => Vec::new(),
                    _ => bail!("OrderedDict built with arguments; only the empty form is read"),
                };
                Value::Dict(Rc::new(RefCell::new(items)))
            }
            "builtins.set" | "__builtin__.set" | "builtins.frozenset" => {
                let items = match &args {
                    Value::Tuple(t) => match t.first() {
                        None => Vec::new(),
                        Some(Value::List(l)) => l.borrow().clone(),
                        Some(other) => bail!("set built from a {}", other.type_name()),
                    },
                    _ => Vec::new(),
                };
                Value::List(Rc::new(RefCell::new(items)))
            }
            "torch._utils._rebuild_tensor_v2" | "torch._utils._rebuild_tensor" => {
                Value::Tensor(Rc::new(tensor(&args)?))
            }
            "torch._utils._rebuild_parameter"
            | "torch._utils._rebuild_parameter_with_state"
            | "torch.nn.parameter.Parameter" => match &args {
                Value::Tuple(t) if matches!(t.first(), Some(Value::Tensor(_))) => t[0].clone(),
                _ => bail!("{class} without a tensor as its first argument"),
            },
            _ => Value::Object(Rc::new(RefCell::new(Object { class, state: None }))),
        })
    }

    fn run(&mut self, allowed: &dyn Fn(&str, &str) -> bool) -> Result<Value> {
        loop {
            let at = self.pos;
            let op = self.u8()?;
            match op {
                0x80 => {
                    let protocol = self.u8()?;
                    if !(2..=5).contains(&protocol) {
                        bail!("pickle protocol {protocol} is not read (torch.save writes 2)");
                    }
                }
                0x95 => {
                    self.take(8)?; // FRAME: a length hint
                }
                b'.' => return self.pop(),
                b'(' => self.marks.push(self.stack.len()),
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let top = self.top()?.clone();
                    self.stack.push(top);
                }
                b'N' => self.stack.push(Value::None),
                0x88 => self.stack.push(Value::Bool(true)),
                0x89 => self.stack.push(Value::Bool(false)),
                b'J' => {
                    let v = i32::from_le_bytes(self.le()?);
                    self.stack.push(Value::Int(v.into()));
                }
                b'K' => {
                    let v = self.u8()?;
                    self.stack.push(Value::Int(v.into()));
                }
                b'M' => {
                    let v = u16::from_le_bytes(self.le()?);
                    self.stack.push(Value::Int(v.into()));
                }
                0x8a | 0x8b => {
                    let n = if op == 0x8a {
                        self.u8()? as usize
                    } else {
                        self.len_u32()?
                    };
                    let bytes = self.take(n)?;
                    let value = if n <= 8 {
                        let fill = if bytes.last().is_some_and(|b| b & 0x80 != 0) {
                            0xff
                        } else {
                            0
                        };
                        let mut full = [fill; 8];
                        full[..n].copy_from_slice(bytes);
                        Value::Int(i64::from_le_bytes(full))
                    } else {
                        Value::BigInt(bytes.to_vec())
                    };
                    self.stack.push(value);
                }
                b'G' => {
                    let v = f64::from_be_bytes(self.le()?);
                    self.stack.push(Value::Float(v));
                }
                b'X' | 0x8c | 0x8d => {
                    let n = match op {
                        b'X' => self.len_u32()?,
                        0x8c => self.u8()? as usize,
                        _ => self.len_u64()?,
                    };
                    let text = self.text(n)?;
                    self.stack.push(Value::Str(text));
                }
                b'B' | b'C' | 0x8e | b'T' | b'U' | 0x96 => {
                    let n = match op {
                        b'B' | b'T' => self.len_u32()?,
                        b'C' | b'U' => self.u8()? as usize,
                        _ => self.len_u64()?,
                    };
                    let bytes = self.take(n)?;
                    // Python 2's `str` (BINSTRING) is text to Python 3's unpickler.
                    let value = if matches!(op, b'T' | b'U') {
                        Value::Str(String::from_utf8_lossy(bytes).into_owned())
                    } else {
                        Value::Bytes
                    };
                    self.stack.push(value);
                }
                b')' => self.stack.push(Value::Tuple(Rc::new(Vec::new()))),
                b't' => {
                    let items = self.pop_mark()?;
                    self.stack.push(Value::Tuple(Rc::new(items)));
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop()?);
                    }
                    items.reverse();
                    self.stack.push(Value::Tuple(Rc::new(items)));
                }
                b']' | 0x8f => self.stack.push(Value::List(Rc::new(RefCell::new(Vec::new())))),
                b'l' => {
                    let items = self.pop_mark()?;
                    self.stack.push(Value::List(Rc::new(RefCell::new(items))));
                }
                b'a' => {
                    let item = self.pop()?;
                    self.append(vec![item])?;
                }
                b'e' | 0x90 => {
                    let items = self.pop_mark()?;
                    self.append(items)?;
                }
                0x91 => {
                    let items = self.pop_mark()?;
                    self.stack.push(Value::List(Rc::new(RefCell::new(items))));
                }
                b'}' => self.stack.push(Value::Dict(Rc::new(RefCell::new(Vec::new())))),
                b'd' => {
                    let items = self.pop_mark()?;
                    self.stack.push(Value::Dict(Rc::new(RefCell::new(Vec::new()))));
                    self.set_items(items)?;
                }
                b's' => {
                    let value = self.pop()?;
                    let key = self.pop()?;
                    self.set_items(vec![key, value])?;
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    self.set_items(items)?;
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    self.global(module, name, allowed)?;
                }
                0x93 => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    match (module.as_str(), name.as_str()) {
                        (Some(module), Some(name)) => {
                            self.global(module.to_string(), name.to_string(), allowed)?
                        }
                        _ => bail!("STACK_GLOBAL needs two strings"),
                    }
                }
                b'R' | 0x81 => {
                    let args = self.pop()?;
                    let callable = self.pop()?;
                    let value = self.construct(callable, args)?;
                    self.stack.push(value);
                }
                0x92 => {
                    let _kwargs = self.pop()?;
                    let args = self.pop()?;
                    let callable = self.pop()?;
                    let value = self.construct(callable, args)?;
                    self.stack.push(value);
                }
                b'b' => {
                    let state = self.pop()?;
                    match self.top()? {
                        Value::Object(object) => object.borrow_mut().state = Some(state),
                        Value::Dict(dict) => {
                            if let Some(items) = state.dict_items() {
                                dict.borrow_mut().extend(items);
                            }
                        }
                        other => bail!("BUILD on a {}", other.type_name()),
                    }
                }
                b'p' => {
                    let index = self
                        .line()?
                        .parse()
                        .map_err(|_| anyhow!("PUT with a bad index"))?;
                    self.memo_put(index)?;
                }
                b'q' => {
                    let index = self.u8()?.into();
                    self.memo_put(index)?;
                }
                b'r' => {
                    let index = u32::from_le_bytes(self.le()?);
                    self.memo_put(index)?;
                }
                0x94 => {
                    let index = self.memo.len() as u32;
                    self.memo_put(index)?;
                }
                b'g' => {
                    let index = self
                        .line()?
                        .parse()
                        .map_err(|_| anyhow!("GET with a bad index"))?;
                    self.memo_get(index)?;
                }
                b'h' => {
                    let index = self.u8()?.into();
                    self.memo_get(index)?;
                }
                b'j' => {
                    let index = u32::from_le_bytes(self.le()?);
                    self.memo_get(index)?;
                }
                b'Q' => {
                    // The legacy format names a module's class by a persistent id
                    // `("module", class, source file, source)`; the class was checked when
                    // the pickle named it. Any other persistent id must be a storage.
                    let pid = self.pop()?;
                    let value = match &pid {
                        Value::Tuple(fields) => match (fields.first(), fields.get(1)) {
                            (Some(Value::Str(tag)), Some(class @ Value::Global(_))) if tag == "module" => {
                                class.clone()
                            }
                            _ => storage(fields)?,
                        },
                        other => bail!("a persistent id that is a {}, not a tuple", other.type_name()),
                    };
                    self.stack.push(value);
                }
                other => bail!("pickle opcode 0x{other:02x} at byte {at} is not read"),
            }
        }
    }
}

/// A storage's persistent id: `("storage", torch.XStorage, key, location, numel[, view])`.
fn storage(fields: &[Value]) -> Result<Value> {
    let class = match (fields.first(), fields.get(1)) {
        (Some(Value::Str(tag)), Some(Value::Global(class)))
            if tag == "storage" && (class.0 == "torch" || class.0 == "torch.cuda") =>
        {
            class.1.clone()
        }
        _ => bail!("a persistent id that is neither a storage nor a module"),
    };
    let key = match fields.get(2) {
        Some(Value::Str(key)) => key.clone(),
        Some(Value::Int(key)) => key.to_string(),
        _ => bail!("a storage without a key"),
    };
    let numel = match fields.get(4) {
        Some(Value::Int(n)) if *n >= 0 => *n as u64,
        _ => bail!("storage {key} without an element count"),
    };
    if !matches!(fields.get(5), None | Some(Value::None)) {
        bail!("storage {key} is a view of another storage (written by PyTorch before 0.4); not read");
    }
    Ok(Value::Storage(Rc::new(StorageRef { class, key, numel })))
}

fn usizes(value: &Value, what: &str) -> Result<Vec<usize>> {
    let Value::Tuple(items) = value else {
        bail!("a tensor's {what} is a {}, not a tuple", value.type_name());
    };
    items
        .iter()
        .map(|v| match v {
            Value::Int(i) => usize::try_from(*i).map_err(|_| anyhow!("a tensor's {what} holds {i}")),
            other => bail!("a tensor's {what} holds a {}", other.type_name()),
        })
        .collect()
}

/// `_rebuild_tensor_v2(storage, offset, size, stride, ...)`.
fn tensor(args: &Value) -> Result<TensorRef> {
    let Value::Tuple(fields) = args else {
        bail!("a tensor rebuilt from a {}", args.type_name());
    };
    let (Some(Value::Storage(storage)), Some(Value::Int(offset)), Some(size), Some(stride)) =
        (fields.first(), fields.get(1), fields.get(2), fields.get(3))
    else {
        bail!("a tensor rebuilt from other arguments than (storage, offset, size, stride, ...)");
    };
    Ok(TensorRef {
        storage: storage.clone(),
        offset: u64::try_from(*offset).map_err(|_| anyhow!("a tensor at offset {offset}"))?,
        shape: usizes(size, "size")?,
        stride: usizes(stride, "stride")?,
    })
}

/// Reads `len` bytes at `offset` of `file`.
fn read_at(file: &mut File, offset: u64, len: usize) -> Result<Vec<u8>> {
    let mut bytes = vec![0u8; len];
    file.seek(SeekFrom::Start(offset))?;
    file.read_exact(&mut bytes).map_err(|_| {
        anyhow!(
            "the file ends before byte {} (is it truncated?)",
            offset + len as u64
        )
    })?;
    Ok(bytes)
}

fn le_u16(b: &[u8], at: usize) -> u64 {
    u16::from_le_bytes([b[at], b[at + 1]]) as u64
}

fn le_u32(b: &[u8], at: usize) -> u64 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]) as u64
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(v)
}

/// Largest `data.pkl` read (a module's pickle holds metadata only; its tensors are elsewhere).
const MAX_PICKLE_BYTES: u64 = 100 << 20;

/// The stored bytes of `archive/data.pkl` in a ZIP-format `torch.save` file (`file` opens
/// with `PK\x03\x04`). `torch.save` stores entries uncompressed; a compressed `data.pkl` is
/// refused.
pub(crate) fn zip_data_pkl(file: &mut File) -> Result<Vec<u8>> {
    let file_len = file.metadata()?.len();
    // End of central directory: the last `PK\x05\x06` within the final 64 KiB + 22 bytes.
    let tail_len = file_len.min(65_557);
    let tail_start = file_len - tail_len;
    let tail = read_at(file, tail_start, tail_len as usize)?;
    let Some(eocd) = (0..tail.len().saturating_sub(21))
        .rev()
        .find(|&at| tail[at..].starts_with(b"PK\x05\x06"))
    else {
        bail!("the ZIP archive has no end-of-directory record (is the file truncated?)");
    };
    let mut entries = le_u16(&tail, eocd + 10);
    let mut dir_len = le_u32(&tail, eocd + 12);
    let mut dir_start = le_u32(&tail, eocd + 16);
    if (dir_start == 0xffff_ffff || entries == 0xffff)
        && eocd >= 20
        && tail[eocd - 20..].starts_with(b"PK\x06\x07")
    {
        let zip64 = le_u64(&tail, eocd - 20 + 8);
        let record = read_at(file, zip64, 56)?;
        if !record.starts_with(b"PK\x06\x06") {
            bail!("the ZIP64 end-of-directory record is missing");
        }
        entries = le_u64(&record, 32);
        dir_len = le_u64(&record, 40);
        dir_start = le_u64(&record, 48);
    }
    if dir_start.saturating_add(dir_len) > file_len || dir_len > MAX_PICKLE_BYTES {
        bail!("the ZIP archive's directory lies outside the file (is it truncated?)");
    }
    let dir = read_at(file, dir_start, dir_len as usize)?;
    let truncated = || anyhow!("the ZIP archive's directory is damaged");
    let mut at = 0usize;
    for _ in 0..entries {
        if !dir.get(at..).is_some_and(|r| r.starts_with(b"PK\x01\x02")) || at + 46 > dir.len() {
            return Err(truncated());
        }
        let method = le_u16(&dir, at + 10);
        let compressed = le_u32(&dir, at + 20);
        let uncompressed = le_u32(&dir, at + 24);
        let name_len = le_u16(&dir, at + 28) as usize;
        let extra_len = le_u16(&dir, at + 30) as usize;
        let comment_len = le_u16(&dir, at + 32) as usize;
        let mut local = le_u32(&dir, at + 42);
        let name = dir.get(at + 46..at + 46 + name_len).ok_or_else(truncated)?;
        if name.ends_with(b"/data.pkl") && name.iter().filter(|&&b| b == b'/').count() == 1 {
            let mut size = compressed;
            // ZIP64 extra field: the sizes and offset that did not fit, in this order.
            let extra = dir
                .get(at + 46 + name_len..at + 46 + name_len + extra_len)
                .ok_or_else(truncated)?;
            let mut e = 0;
            while e + 4 <= extra.len() {
                let id = le_u16(extra, e);
                let len = le_u16(extra, e + 2) as usize;
                if id == 1 {
                    let body = &extra[e + 4..(e + 4 + len).min(extra.len())];
                    let mut fields = body.chunks_exact(8).map(|c| le_u64(c, 0));
                    if uncompressed == 0xffff_ffff {
                        fields.next();
                    }
                    if compressed == 0xffff_ffff {
                        size = fields.next().unwrap_or(size);
                    }
                    if local == 0xffff_ffff {
                        local = fields.next().unwrap_or(local);
                    }
                }
                e += 4 + len;
            }
            if method != 0 {
                bail!(
                    "data.pkl in the ZIP archive is compressed (method {method}); torch.save stores it as is"
                );
            }
            if size > MAX_PICKLE_BYTES {
                bail!("data.pkl in the ZIP archive claims {size} bytes; more than 100 MiB is refused");
            }
            let header = read_at(file, local, 30)?;
            if !header.starts_with(b"PK\x03\x04") {
                bail!("the ZIP archive's entry for data.pkl is damaged");
            }
            let start = local.saturating_add(30 + le_u16(&header, 26) + le_u16(&header, 28));
            if start.saturating_add(size) > file_len {
                bail!("the file ends inside data.pkl (is it truncated?)");
            }
            return read_at(file, start, size as usize);
        }
        at += 46 + name_len + extra_len + comment_len;
    }
    bail!("the ZIP archive holds no data.pkl: not a torch.save file")
}

/// The magic number opening a legacy (before PyTorch 1.6) `torch.save` stream.
const LEGACY_MAGIC: [u8; 10] = [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];

/// The object pickle of a legacy `torch.save` stream: after the magic number, the protocol
/// version (1001) and the system information comes the saved object's pickle; its storages
/// follow it. `None` when the file does not open with the magic number.
pub(crate) fn legacy_object(
    file: &mut File,
    allowed: &dyn Fn(&str, &str) -> bool,
) -> Result<Option<(Value, u64)>> {
    let len = file.metadata()?.len().min(MAX_PICKLE_BYTES);
    let file = read_at(file, 0, len as usize)?;
    let file = file.as_slice();
    let none = |_: &str, _: &str| false;
    let Ok((magic, after_magic)) = read_pickle(file, 0, &none) else {
        return Ok(None);
    };
    if !matches!(&magic, Value::BigInt(bytes) if bytes[..] == LEGACY_MAGIC) {
        return Ok(None);
    }
    let (version, after_version) = read_pickle(file, after_magic, &none)?;
    if !matches!(version, Value::Int(1001)) {
        bail!("legacy torch.save stream of protocol version {version:?}; only 1001 is read");
    }
    let (_sys_info, after_info) = read_pickle(file, after_version, &none)?;
    let (object, after_object) = read_pickle(file, after_info, allowed)?;
    Ok(Some((object, after_object as u64)))
}

/// Where each storage's bytes lie in a legacy stream whose object pickle ends at `start`:
/// a pickled list of the storage keys, then per key its element count (`i64`) and elements.
/// `element_bytes(key)` is the element size of the storage of that key. Returns, per key,
/// where its elements start and how many the stream holds.
pub(crate) fn legacy_storage_offsets(
    file: &mut File,
    start: u64,
    element_bytes: &dyn Fn(&str) -> Result<u64>,
) -> Result<std::collections::HashMap<String, (u64, u64)>> {
    let file_len = file.metadata()?.len();
    let head = read_at(
        file,
        start,
        (file_len - start.min(file_len)).min(MAX_PICKLE_BYTES) as usize,
    )?;
    let none = |_: &str, _: &str| false;
    let (keys, used) = read_pickle(&head, 0, &none)?;
    let Value::List(keys) = &keys else {
        bail!("the legacy stream's storage list is a {}", keys.type_name());
    };
    let mut at = start + used as u64;
    let mut offsets = std::collections::HashMap::new();
    for key in keys.borrow().iter() {
        let Some(key) = key.as_str() else {
            bail!("a storage key that is not a string");
        };
        let numel = u64::from_le_bytes(read_at(file, at, 8)?.try_into().unwrap_or([0; 8]));
        let bytes = numel
            .checked_mul(element_bytes(key)?)
            .filter(|&b| at.saturating_add(8).saturating_add(b) <= file_len)
            .ok_or_else(|| {
                anyhow!("storage {key} claims {numel} elements, past the end of the file (is it truncated?)")
            })?;
        offsets.insert(key.to_string(), (at + 8, numel));
        at += 8 + bytes;
    }
    Ok(offsets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emptying_the_containers_frees_a_cycle() {
        let list = Rc::new(RefCell::new(Vec::new()));
        let dict = Rc::new(RefCell::new(Vec::new()));
        list.borrow_mut().push(Value::Dict(dict.clone()));
        dict.borrow_mut()
            .push((Value::Str("k".into()), Value::List(list.clone())));
        let roots = vec![Value::List(list.clone())];
        assert!(holds_cycle(&roots));
        let (list_alive, dict_alive) = (Rc::downgrade(&list), Rc::downgrade(&dict));
        drop((list, dict));
        assert!(list_alive.upgrade().is_some(), "the cycle keeps itself alive");
        empty_containers(roots);
        assert!(list_alive.upgrade().is_none() && dict_alive.upgrade().is_none());
    }
}
