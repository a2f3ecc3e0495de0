/* A small JSON Schema validator for the grammar tests: the keywords the
 * grammar compiler accepts (type, enum, const, properties, required,
 * additionalProperties, items, prefixItems, min/maxItems, min/maxLength in
 * code points, minimum/maximum and the exclusive forms, format date, time,
 * date-time, uuid, int32, anyOf, oneOf as exactly one, allOf, local $ref).
 * Independent of the compiler on purpose: it checks what was generated. */
#ifndef GEM_TESTS_GRAMMAR_SCHEMA_CHECK_H
#define GEM_TESTS_GRAMMAR_SCHEMA_CHECK_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/json.h"

static int sc_json_eq(const json *a, const json *b) {
    if (a->type != b->type) return 0;
    switch (a->type) {
    case JSON_NULL: return 1;
    case JSON_BOOL: return a->boolean == b->boolean;
    case JSON_NUMBER: return a->num == b->num;
    case JSON_STRING: return a->len == b->len && !memcmp(a->str, b->str, a->len);
    case JSON_ARRAY:
        if (a->len != b->len) return 0;
        for (size_t i = 0; i < a->len; i++)
            if (!sc_json_eq(a->items[i], b->items[i])) return 0;
        return 1;
    case JSON_OBJECT:
        if (a->len != b->len) return 0;
        for (size_t i = 0; i < a->len; i++) {
            const json *o = json_get(b, a->keys[i]);
            if (!o || !sc_json_eq(a->items[i], o)) return 0;
        }
        return 1;
    }
    return 0;
}

static size_t sc_codepoints(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

static int sc_digits(const char *s, int n) {
    for (int i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

static int sc_num2(const char *s) { return (s[0] - '0') * 10 + (s[1] - '0'); }

static int sc_date(const char *s, size_t n) {
    if (n != 10 || !sc_digits(s, 4) || s[4] != '-' || !sc_digits(s + 5, 2) || s[7] != '-' || !sc_digits(s + 8, 2)) return 0;
    int y = atoi(s), m = sc_num2(s + 5), d = sc_num2(s + 8);
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m < 1 || m > 12 || d < 1) return 0;
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return d <= days[m - 1] + (m == 2 && leap);
}

static int sc_time(const char *s, size_t n) {
    if (n < 9 || !sc_digits(s, 2) || s[2] != ':' || !sc_digits(s + 3, 2) || s[5] != ':' || !sc_digits(s + 6, 2)) return 0;
    if (sc_num2(s) > 23 || sc_num2(s + 3) > 59 || sc_num2(s + 6) > 59) return 0;
    size_t i = 8;
    if (i < n && s[i] == '.') {
        size_t j = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == j) return 0;
    }
    if (i == n) return 0; /* an offset is required */
    if ((s[i] == 'Z' || s[i] == 'z') && i + 1 == n) return 1;
    if ((s[i] != '+' && s[i] != '-') || n - i != 6 || !sc_digits(s + i + 1, 2) || s[i + 3] != ':' || !sc_digits(s + i + 4, 2))
        return 0;
    return sc_num2(s + i + 1) <= 23 && sc_num2(s + i + 4) <= 59;
}

static int sc_uuid(const char *s, size_t n) {
    if (n != 36) return 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-') return 0;
        } else if (!strchr("0123456789abcdefABCDEF", s[i]) || !s[i])
            return 0;
    }
    return 1;
}

static const json *sc_resolve(const json *root, const char *ref) {
    if (!strcmp(ref, "#")) return root;
    const char *p;
    const json *d;
    if (!strncmp(ref, "#/$defs/", 8)) {
        p = ref + 8;
        d = json_get(root, "$defs");
    } else if (!strncmp(ref, "#/definitions/", 14)) {
        p = ref + 14;
        d = json_get(root, "definitions");
    } else
        return NULL;
    char name[256];
    size_t k = 0;
    for (; *p && k + 1 < sizeof name; p++) {
        if (*p == '~' && (p[1] == '0' || p[1] == '1')) {
            name[k++] = p[1] == '1' ? '/' : '~';
            p++;
        } else
            name[k++] = *p;
    }
    name[k] = 0;
    return d ? json_get(d, name) : NULL;
}

static int sc_type_ok(const char *t, const json *v) {
    if (!strcmp(t, "null")) return v->type == JSON_NULL;
    if (!strcmp(t, "boolean")) return v->type == JSON_BOOL;
    if (!strcmp(t, "object")) return v->type == JSON_OBJECT;
    if (!strcmp(t, "array")) return v->type == JSON_ARRAY;
    if (!strcmp(t, "string")) return v->type == JSON_STRING;
    if (!strcmp(t, "number")) return v->type == JSON_NUMBER;
    if (!strcmp(t, "integer")) return v->type == JSON_NUMBER && v->num == floor(v->num);
    return 0;
}

/* 1 when v is valid against schema s (root: for $ref). */
static int sc_valid(const json *root, const json *s, const json *v) {
    if (s->type == JSON_BOOL) return s->boolean;
    if (s->type != JSON_OBJECT) return 0;
    const json *k;
    if ((k = json_get(s, "$ref"))) {
        const json *t = sc_resolve(root, k->str);
        if (!t || !sc_valid(root, t, v)) return 0;
    }
    if ((k = json_get(s, "allOf")))
        for (size_t i = 0; i < k->len; i++)
            if (!sc_valid(root, k->items[i], v)) return 0;
    if ((k = json_get(s, "anyOf"))) {
        int any = 0;
        for (size_t i = 0; i < k->len && !any; i++) any = sc_valid(root, k->items[i], v);
        if (!any) return 0;
    }
    if ((k = json_get(s, "oneOf"))) {
        int cnt = 0;
        for (size_t i = 0; i < k->len; i++) cnt += sc_valid(root, k->items[i], v);
        if (cnt != 1) return 0;
    }
    if ((k = json_get(s, "type"))) {
        int any = 0;
        if (k->type == JSON_STRING) any = sc_type_ok(k->str, v);
        else
            for (size_t i = 0; i < k->len && !any; i++) any = sc_type_ok(k->items[i]->str, v);
        if (!any) return 0;
    }
    if ((k = json_get(s, "enum"))) {
        int any = 0;
        for (size_t i = 0; i < k->len && !any; i++) any = sc_json_eq(k->items[i], v);
        if (!any) return 0;
    }
    if ((k = json_get(s, "const")) && !sc_json_eq(k, v)) return 0;
    if (v->type == JSON_STRING) {
        size_t cp = sc_codepoints(v->str, v->len);
        if ((k = json_get(s, "minLength")) && cp < k->num) return 0;
        if ((k = json_get(s, "maxLength")) && cp > k->num) return 0;
        const char *f = json_get_str(s, "format");
        if (f && !strcmp(f, "date") && !sc_date(v->str, v->len)) return 0;
        if (f && !strcmp(f, "time") && !sc_time(v->str, v->len)) return 0;
        if (f && !strcmp(f, "date-time") &&
            (v->len < 11 || !sc_date(v->str, 10) || (v->str[10] != 'T' && v->str[10] != 't') || !sc_time(v->str + 11, v->len - 11)))
            return 0;
        if (f && !strcmp(f, "uuid") && !sc_uuid(v->str, v->len)) return 0;
    }
    if (v->type == JSON_NUMBER) {
        const json *emn = json_get(s, "exclusiveMinimum"), *emx = json_get(s, "exclusiveMaximum");
        int bmn = emn && emn->type == JSON_BOOL && emn->boolean, bmx = emx && emx->type == JSON_BOOL && emx->boolean;
        if ((k = json_get(s, "minimum")) && (bmn ? v->num <= k->num : v->num < k->num)) return 0;
        if ((k = json_get(s, "maximum")) && (bmx ? v->num >= k->num : v->num > k->num)) return 0;
        if (emn && emn->type == JSON_NUMBER && v->num <= emn->num) return 0;
        if (emx && emx->type == JSON_NUMBER && v->num >= emx->num) return 0;
        const char *f = json_get_str(s, "format");
        if (f && !strcmp(f, "int32") && (v->num < -2147483648.0 || v->num > 2147483647.0)) return 0;
    }
    if (v->type == JSON_OBJECT) {
        const json *props = json_get(s, "properties"), *addl = json_get(s, "additionalProperties");
        if ((k = json_get(s, "required")))
            for (size_t i = 0; i < k->len; i++)
                if (!json_get(v, k->items[i]->str)) return 0;
        for (size_t i = 0; i < v->len; i++) {
            const json *ps = props ? json_get(props, v->keys[i]) : NULL;
            if (ps) {
                if (!sc_valid(root, ps, v->items[i])) return 0;
            } else if (addl && !sc_valid(root, addl, v->items[i]))
                return 0;
        }
    }
    if (v->type == JSON_ARRAY) {
        const json *pre = json_get(s, "prefixItems"), *items = json_get(s, "items");
        size_t np = pre ? pre->len : 0;
        if ((k = json_get(s, "minItems")) && v->len < k->num) return 0;
        if ((k = json_get(s, "maxItems")) && v->len > k->num) return 0;
        for (size_t i = 0; i < v->len; i++) {
            const json *is = i < np ? pre->items[i] : items;
            if (is && !sc_valid(root, is, v->items[i])) return 0;
        }
    }
    return 1;
}

#endif
