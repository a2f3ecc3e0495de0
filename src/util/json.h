/* JSON values: a strict RFC 8259 parser, a small builder and a serializer.
 *
 * Parsing rejects anything the RFC does not allow (comments, trailing
 * commas, leading zeros, invalid UTF-8, lone surrogate escapes, nesting
 * deeper than JSON_MAX_DEPTH) with an error naming the byte offset. Objects
 * keep their keys in first-seen order; a repeated key keeps its first
 * position and takes the last value (what JavaScript's JSON.parse does, so
 * templates rendered from parsed requests agree with JS Jinja engines).
 * Numbers are doubles, with `is_int` recording an integral value in the
 * int64 range; a parsed number also keeps its literal (str) and whether it
 * was written with a fraction or exponent (num_frac), so a renderer can
 * print it as another language's parser read it. Strings may hold NUL
 * bytes (len is authoritative).
 *
 * Bounded parsing (json_parse_limited, for request bodies): a budget of
 * values, and packed integer arrays. A value costs a node of about a
 * hundred bytes (and a number its literal), so an 8 MB body of
 * "[1,1,1,...]" would otherwise become 400 MB; inside one named member of
 * the top-level object, an array whose elements are all integers in the
 * int32 range is held as one int32 array instead (`ints`, no element
 * nodes and no literals: 4 bytes an element, at most twice the text).
 * Only that member's readers see packed arrays. */
#ifndef GEM_UTIL_JSON_H
#define GEM_UTIL_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"
#include "util/strbuf.h"

#define JSON_MAX_DEPTH 128

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_type;

typedef struct json json;
struct json {
    json_type type;
    int boolean;
    double num;
    int is_int;       /* num is integral and fits int64 */
    int num_frac;     /* parsed number written with '.', 'e' or 'E' */
    char *str;        /* JSON_STRING: NUL-terminated, len bytes; parsed
                         JSON_NUMBER: its literal (NULL when built) */
    size_t len;       /* string bytes, or array/object element count */
    json **items;     /* array elements / object values */
    char **keys;      /* object keys (NUL-terminated) */
    size_t *key_lens;
    size_t cap;
    int32_t *ints;    /* JSON_ARRAY packed by json_parse_limited: len integers, items NULL */
};

json *json_parse(const char *s, size_t n, gem_err *err);

typedef struct {
    size_t max_values;         /* nodes at most (a packed array is one); 0: no bound */
    const char *packed_member; /* a top-level object member whose integer arrays are packed, or NULL */
    int over;                  /* out: the parse failed because max_values was reached */
} json_limits;
/* json_parse within lim (see the top of this file). */
json *json_parse_limited(const char *s, size_t n, json_limits *lim, gem_err *err);
void json_free(json *v);

/* Lookups (NULL when absent or when v is not an object/array; json_at is
 * NULL on a packed array, whose elements are ints[]). */
json *json_get(const json *obj, const char *key);
json *json_at(const json *arr, size_t i);
const char *json_get_str(const json *obj, const char *key); /* NULL unless a string */

/* Truthiness as Jinja sees it: null/false/0/""/[]/{} are false. */
int json_truthy(const json *v);

/* Builders. Ownership of `v` passes to the container. Return 0 or -1 (OOM). */
json *json_new(json_type t);
json *json_new_str(const char *s, size_t n);
json *json_new_num(double d);
json *json_new_bool(int b);
int json_push(json *arr, json *v);
int json_set(json *obj, const char *key, json *v); /* replaces an existing key in place */

/* Compact serialization (no spaces), strings escaped as JSON requires;
 * non-ASCII is written as UTF-8. */
void json_dump(const json *v, strbuf *out);
/* A JavaScript-style number rendering: integers without a fraction,
 * otherwise the shortest round-trip digits (what String(n) gives). */
void json_num_js(double d, strbuf *out);
/* Python's renderings of what json.loads returns (what Jinja templates
 * rendered by transformers print): json_dump_py is json.dumps with its
 * default separators (", ", ": ") and ensure_ascii=False; json_str_py is
 * str() of a scalar (True, None, 1.0) and json.dumps of a container;
 * json_num_py is repr() of a float. */
void json_dump_py(const json *v, strbuf *out);
void json_str_py(const json *v, strbuf *out);
void json_num_py(double d, strbuf *out);
/* Appends s as a JSON string literal with quotes. */
void json_quote(const char *s, size_t n, strbuf *out);

#endif
