//! `table.expand.json.payload=true`: the payload as a Connect value with a schema
//! inferred from the JSON, as Debezium's Outbox Event Router builds it.
//!
//! Owns the inference rules the golden records show (tests/fixtures/debezium):
//! - only a JSON **object** is expanded; any other payload stays the JSON text;
//! - an object becomes a struct named by its path (`payload`, `payload.meta`; an
//!   object in an array of arrays has no name), its
//!   fields in the text's order, **without** the fields whose value is `null` or an
//!   empty array (their type cannot be inferred);
//! - a whole number is `int32` when it fits, else `int64`; one beyond 64 bits makes
//!   the payload unexpandable; any other number is a `double`;
//! - an array's elements must share one schema (`[1, 3000000000]`, `[1, 2.5]`,
//!   `[1, "a"]` do not; `null` elements are allowed next to others, `[null]` and
//!   `[[]]` are not); objects of one array with different fields are merged into
//!   one struct of all their fields (then not optional; missing fields are written
//!   as `null`), and a field with two types makes the payload unexpandable;
//! - a payload that breaks a rule is **not expanded**: it stays the JSON text, which
//!   is what Debezium does when its expansion fails. (When the failure comes from a
//!   number beyond 64 bits Debezium goes further and fails the task under
//!   JsonConverter; pgoutbox delivers the text.)
//!
//! Invariants: never panics; nesting deeper than [`MAX_DEPTH`] is not expanded (no
//! unbounded recursion).

use super::jackson;

/// Deepest nesting expanded (Jackson's default limit is of this order).
pub const MAX_DEPTH: usize = 500;

/// A parsed JSON value, object fields in text order.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Arr(Vec<Node>),
    Obj(Vec<(String, Node)>),
}

/// An inferred Connect schema.
#[derive(Debug, Clone, PartialEq)]
enum Schema {
    Bool,
    Int32,
    Int64,
    Double,
    Str,
    Arr(Box<Schema>),
    Struct {
        /// `None` inside an array of arrays, where Debezium names no struct.
        name: Option<String>,
        fields: Vec<(String, Schema)>,
        optional: bool,
    },
}

/// An expanded payload: the value and its schema.
#[derive(Debug, Clone, PartialEq)]
pub struct Expanded {
    node: Node,
    schema: Schema,
}

/// Expand `payload` if Debezium would (a JSON object that follows every rule).
pub fn expand(payload: &[u8]) -> Option<Expanded> {
    let text = std::str::from_utf8(payload).ok()?;
    let mut parser = Parser { text, pos: 0 };
    let node = parser.value(0)?;
    parser.skip_ws();
    if parser.pos != text.len() || !matches!(node, Node::Obj(_)) {
        return None;
    }
    let schema = infer(&node, Some("payload")).ok()??;
    Some(Expanded { node, schema })
}

impl Expanded {
    /// The value as JsonConverter writes it.
    pub fn push_json(&self, out: &mut Vec<u8>) {
        push_value(out, &self.node, &self.schema);
    }

    /// The schema as JsonConverter writes it; `field` names it inside a struct.
    pub fn push_schema(&self, out: &mut Vec<u8>, field: Option<&str>) {
        push_schema(out, &self.schema, field);
    }

    /// The value as Connect's `Struct.toString` prints it (StringConverter).
    pub fn push_display(&self, out: &mut Vec<u8>) {
        push_display(out, &self.node, &self.schema);
    }
}

/// `Ok(None)`: no schema can be inferred (null, empty array): the field is left out.
/// `Err(())`: the payload is not expandable.
fn infer(node: &Node, path: Option<&str>) -> Result<Option<Schema>, ()> {
    Ok(Some(match node {
        Node::Null => return Ok(None),
        Node::Bool(_) => Schema::Bool,
        Node::Int(i) if i32::try_from(*i).is_ok() => Schema::Int32,
        Node::Int(_) => Schema::Int64,
        Node::Float(_) => Schema::Double,
        Node::Str(_) => Schema::Str,
        Node::Obj(fields) => {
            let mut out = Vec::with_capacity(fields.len());
            for (name, value) in fields {
                let child = path.map(|p| format!("{p}.{name}"));
                if let Some(schema) = infer(value, child.as_deref())? {
                    out.push((name.clone(), schema));
                }
            }
            Schema::Struct {
                name: path.map(str::to_owned),
                fields: out,
                optional: true,
            }
        }
        Node::Arr(items) if items.is_empty() => return Ok(None),
        Node::Arr(items) => Schema::Arr(Box::new(array_items(items, path)?)),
    }))
}

/// The one schema of an array's elements.
fn array_items(items: &[Node], path: Option<&str>) -> Result<Schema, ()> {
    let mut schemas = Vec::new();
    for item in items {
        match item {
            Node::Null => {}
            // An empty array inside an array has no member schema.
            Node::Arr(inner) if inner.is_empty() => return Err(()),
            // The elements of an inner array have no path: their structs no name.
            Node::Arr(_) => schemas.extend(infer(item, None)?),
            _ => schemas.extend(infer(item, path)?),
        }
    }
    let first = schemas.first().ok_or(())?.clone();
    if !matches!(first, Schema::Struct { .. }) {
        return match schemas.iter().all(|s| *s == first) {
            true => Ok(first),
            false => Err(()),
        };
    }
    if schemas.iter().all(|s| *s == first) {
        return Ok(first);
    }
    let mut merged: Vec<(String, Schema)> = Vec::new();
    for schema in &schemas {
        let Schema::Struct { fields, .. } = schema else {
            return Err(());
        };
        for (name, field) in fields {
            match merged.iter().find(|(n, _)| n == name) {
                Some((_, known)) if known != field => return Err(()),
                Some(_) => {}
                None => merged.push((name.clone(), field.clone())),
            }
        }
    }
    Ok(Schema::Struct {
        name: path.map(str::to_owned),
        fields: merged,
        optional: false,
    })
}

fn field<'a>(fields: &'a [(String, Node)], name: &str) -> &'a Node {
    fields
        .iter()
        .rev()
        .find(|(n, _)| n == name)
        .map_or(&Node::Null, |(_, v)| v)
}

fn push_value(out: &mut Vec<u8>, node: &Node, schema: &Schema) {
    match (node, schema) {
        (Node::Null, _) => out.extend_from_slice(b"null"),
        (Node::Bool(b), _) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        (Node::Int(i), _) => out.extend_from_slice(i.to_string().as_bytes()),
        (Node::Float(f), _) => jackson::push_double(out, *f),
        (Node::Str(s), _) => jackson::push_string(out, s.as_bytes()),
        (Node::Arr(items), Schema::Arr(item)) => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                push_value(out, v, item);
            }
            out.push(b']');
        }
        (Node::Obj(values), Schema::Struct { fields, .. }) => {
            out.push(b'{');
            for (i, (name, schema)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                jackson::push_string(out, name.as_bytes());
                out.push(b':');
                push_value(out, field(values, name), schema);
            }
            out.push(b'}');
        }
        // Inference guarantees shapes match; write nothing odd if they did not.
        _ => out.extend_from_slice(b"null"),
    }
}

fn push_schema(out: &mut Vec<u8>, schema: &Schema, field: Option<&str>) {
    let simple = |t: &str| format!("{{\"type\":\"{t}\",\"optional\":true");
    let head = match schema {
        Schema::Bool => simple("boolean"),
        Schema::Int32 => simple("int32"),
        Schema::Int64 => simple("int64"),
        Schema::Double => simple("double"),
        Schema::Str => simple("string"),
        Schema::Arr(item) => {
            out.extend_from_slice(b"{\"type\":\"array\",\"items\":");
            push_schema(out, item, None);
            ",\"optional\":true".to_owned()
        }
        Schema::Struct {
            name,
            fields,
            optional,
        } => {
            out.extend_from_slice(b"{\"type\":\"struct\",\"fields\":[");
            for (i, (n, s)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                push_schema(out, s, Some(n));
            }
            out.extend_from_slice(format!("],\"optional\":{optional}").as_bytes());
            if let Some(name) = name {
                out.extend_from_slice(b",\"name\":");
                jackson::push_string(out, name.as_bytes());
            }
            String::new()
        }
    };
    out.extend_from_slice(head.as_bytes());
    super::schema::push_field(out, field);
    out.push(b'}');
}

fn push_display(out: &mut Vec<u8>, node: &Node, schema: &Schema) {
    match (node, schema) {
        (Node::Null, _) => out.extend_from_slice(b"null"),
        (Node::Str(s), _) => out.extend_from_slice(s.as_bytes()),
        (Node::Arr(items), Schema::Arr(item)) => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(b", ");
                }
                push_display(out, v, item);
            }
            out.push(b']');
        }
        (Node::Obj(values), Schema::Struct { fields, .. }) => {
            out.extend_from_slice(b"Struct{");
            let mut first = true;
            for (name, schema) in fields {
                let value = field(values, name);
                if *value == Node::Null {
                    continue;
                }
                if !first {
                    out.push(b',');
                }
                first = false;
                out.extend_from_slice(name.as_bytes());
                out.push(b'=');
                push_display(out, value, schema);
            }
            out.push(b'}');
        }
        // Numbers and booleans print as in JSON.
        (v, s) => push_value(out, v, s),
    }
}

/// A recursive-descent JSON parser over valid-or-not text; `None` on anything
/// it does not accept.
struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn skip_ws(&mut self) {
        let rest = &self.text[self.pos..];
        self.pos += rest.len() - rest.trim_start_matches([' ', '\t', '\n', '\r']).len();
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn eat(&mut self, literal: &str) -> Option<()> {
        self.text[self.pos..].starts_with(literal).then(|| {
            self.pos += literal.len();
        })
    }

    fn value(&mut self, depth: usize) -> Option<Node> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.skip_ws();
        match self.peek()? {
            b'{' => self.object(depth),
            b'[' => self.array(depth),
            b'"' => self.string().map(Node::Str),
            b't' => self.eat("true").map(|()| Node::Bool(true)),
            b'f' => self.eat("false").map(|()| Node::Bool(false)),
            b'n' => self.eat("null").map(|()| Node::Null),
            _ => self.number(),
        }
    }

    fn object(&mut self, depth: usize) -> Option<Node> {
        self.pos += 1;
        let mut fields = Vec::new();
        self.skip_ws();
        if self.eat("}").is_some() {
            return Some(Node::Obj(fields));
        }
        loop {
            self.skip_ws();
            let name = self.string()?;
            self.skip_ws();
            self.eat(":")?;
            fields.push((name, self.value(depth + 1)?));
            self.skip_ws();
            if self.eat(",").is_none() {
                self.eat("}")?;
                return Some(Node::Obj(fields));
            }
        }
    }

    fn array(&mut self, depth: usize) -> Option<Node> {
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_ws();
        if self.eat("]").is_some() {
            return Some(Node::Arr(items));
        }
        loop {
            items.push(self.value(depth + 1)?);
            self.skip_ws();
            if self.eat(",").is_none() {
                self.eat("]")?;
                return Some(Node::Arr(items));
            }
        }
    }

    fn number(&mut self) -> Option<Node> {
        let rest = &self.text[self.pos..];
        let len = rest
            .find(|c: char| !matches!(c, '0'..='9' | '-' | '+' | '.' | 'e' | 'E'))
            .unwrap_or(rest.len());
        let literal = &rest[..len];
        if literal.is_empty() {
            return None;
        }
        self.pos += len;
        if literal.contains(['.', 'e', 'E']) {
            literal.parse().ok().map(Node::Float)
        } else {
            // Beyond 64 bits: not expandable.
            literal.parse().ok().map(Node::Int)
        }
    }

    fn string(&mut self) -> Option<String> {
        self.eat("\"")?;
        let mut out = String::new();
        loop {
            let rest = &self.text[self.pos..];
            let stop = rest.find(['"', '\\'])?;
            out.push_str(&rest[..stop]);
            self.pos += stop + 1;
            if rest.as_bytes()[stop] == b'"' {
                return Some(out);
            }
            self.escape(&mut out)?;
        }
    }

    fn escape(&mut self, out: &mut String) -> Option<()> {
        let c = self.peek()?;
        self.pos += 1;
        out.push(match c {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => return self.unicode(out),
            _ => return None,
        });
        Some(())
    }

    fn unicode(&mut self, out: &mut String) -> Option<()> {
        let unit = self.hex4()?;
        let c = if (0xD800..0xDC00).contains(&unit) && self.eat("\\u").is_some() {
            let low = self.hex4()?;
            char::decode_utf16([unit, low])
                .next()?
                .unwrap_or('\u{FFFD}')
        } else {
            char::from_u32(u32::from(unit)).unwrap_or('\u{FFFD}')
        };
        out.push(c);
        Some(())
    }

    fn hex4(&mut self) -> Option<u16> {
        let digits = self.text.get(self.pos..self.pos + 4)?;
        self.pos += 4;
        u16::from_str_radix(digits, 16).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(payload: &str) -> Option<String> {
        let e = expand(payload.as_bytes())?;
        let mut out = Vec::new();
        e.push_json(&mut out);
        Some(String::from_utf8(out).unwrap())
    }

    #[test]
    fn drops_nulls_and_empty_arrays_keeps_order() {
        assert_eq!(
            json(r#"{"id": 7, "ok": true, "meta": {}, "note": null, "tags": [], "items": [{"qty": 2, "sku": "X-1", "gift": null}], "price": 12.50}"#).unwrap(),
            r#"{"id":7,"ok":true,"meta":{},"items":[{"qty":2,"sku":"X-1"}],"price":12.5}"#
        );
    }

    #[test]
    fn unexpandable_payloads_stay_text() {
        for p in [
            "[1, 2]",
            "\"s\"",
            r#"{"n": [null]}"#,
            r#"{"v": [1, 3000000000]}"#,
            r#"{"v": [1, 2.5]}"#,
            r#"{"e": [[]]}"#,
            r#"{"big": 12345678901234567890}"#,
            r#"{"o": [{"a": 1}, {"a": "x"}]}"#,
            "not json",
        ] {
            assert_eq!(json(p), None, "{p}");
        }
        let deep = format!(
            "{}{}",
            "{\"a\":".repeat(MAX_DEPTH + 2),
            "}".repeat(MAX_DEPTH + 2)
        );
        assert_eq!(json(&deep), None);
    }

    #[test]
    fn merges_objects_of_an_array() {
        let e = expand(br#"{"o": [{"a": 1}, {"b": 2}]}"#).unwrap();
        let mut schema = Vec::new();
        e.push_schema(&mut schema, None);
        assert_eq!(
            String::from_utf8(schema).unwrap(),
            r#"{"type":"struct","fields":[{"type":"array","items":{"type":"struct","fields":[{"type":"int32","optional":true,"field":"a"},{"type":"int32","optional":true,"field":"b"}],"optional":false,"name":"payload.o"},"optional":true,"field":"o"}],"optional":true,"name":"payload"}"#
        );
        assert_eq!(
            json(r#"{"o": [{"a": 1}, {"b": 2}]}"#).unwrap(),
            r#"{"o":[{"a":1,"b":null},{"a":null,"b":2}]}"#
        );
    }

    #[test]
    fn displays_like_connect_struct() {
        let e = expand(br#"{"ctl": "a\tb", "m": {}, "x": [1, 2], "n": null}"#).unwrap();
        let mut out = Vec::new();
        e.push_display(&mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "Struct{ctl=a\tb,m=Struct{},x=[1, 2]}"
        );
    }
}
