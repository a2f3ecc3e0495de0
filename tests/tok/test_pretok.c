/* The qwen35 pre-tokenizer word by word: each alternative of its pattern,
 * the white-space look-ahead, combining marks, numbers of other scripts,
 * and the Unicode table's properties at known code points. (The golden
 * corpus in test_tok_bbpe checks the whole tokenizer against the
 * reference; this pins the split rules themselves.) */
#include <stdio.h>
#include <string.h>

#include "test.h"
#include "tok/pretok.h"
#include "tok/unicode_tab.h"

/* The words of text joined with '|'. */
static void split(const char *text, char *out, size_t cap) {
    size_t n = strlen(text), o = 0;
    for (size_t pos = 0; pos < n;) {
        size_t end = pretok_next(PRETOK_QWEN35, text, n, pos);
        if (end <= pos || end > n) { snprintf(out, cap, "BAD END"); return; }
        if (pos && o + 1 < cap) out[o++] = '|';
        for (size_t i = pos; i < end && o + 1 < cap; i++) out[o++] = text[i];
        pos = end;
    }
    out[o] = 0;
}

static void words(const char *text, const char *want) {
    char got[512];
    split(text, got, sizeof got);
    CHECKF(!strcmp(got, want), "'%s': got '%s', want '%s'", text, got, want);
}

int main(void) {
    pretok_kind k;
    CHECK(pretok_from_name("qwen35", 6, &k) == 0 && k == PRETOK_QWEN35);
    CHECK(pretok_from_name("qwen2", 5, &k) == -1 && pretok_from_name("", 0, &k) == -1);
    /* letters with one leading non-letter, numbers one digit at a time */
    words("Hello world", "Hello| world");
    words("abc123def", "abc|1|2|3|def");
    words("(x) [y]", "(x|)| [|y|]");
    /* contractions, any case; anything else after an apostrophe */
    words("I'm DON'T we'LL", "I|'m| DON|'T| we|'LL");
    words("'x 'r", "'x| '|r");
    /* punctuation runs take one leading space and trailing line breaks */
    words("a !!\n\nb", "a| !!\n\n|b");
    words("...\r\nx", "...\r\n|x");
    /* white space: up to the last line break; before a word all but the
     * last code point; at the end all of it */
    words("a  \n  b", "a|  \n| | b");
    words("a    b", "a|   | b");
    words("a   ", "a|   ");
    words("\t\tx", "\t|\tx");
    words("x \xe2\x80\x83 y", "x| \xe2\x80\x83| y"); /* U+2003 is white space */
    words("x\xc2\xa0y", "x|\xc2\xa0y");               /* U+00A0 leads a word like a space */
    /* combining marks extend letters and may start a word */
    words("e\xcc\x81t\xc3\xa9", "e\xcc\x81t\xc3\xa9");
    words("1\xcc\x81", "1|\xcc\x81");
    words(" \xcc\x81x", " \xcc\x81x");
    /* numbers of other scripts are numbers; a lone space at the end is a word */
    words("\xd9\xa1\xd9\xa2 ", "\xd9\xa1|\xd9\xa2| ");
    words(" ", " ");
    /* the table at known code points */
    CHECK(ucd_flags('a') == UCD_LETTER && ucd_flags('7') == UCD_NUMBER && ucd_flags(' ') == UCD_SPACE);
    CHECK(ucd_flags(0x0301) == UCD_MARK && ucd_flags(0x3000) == UCD_SPACE && ucd_flags(0x200b) == 0);
    CHECK(ucd_flags(0x4e00) == UCD_LETTER && ucd_flags(0x2ebf0) == UCD_LETTER); /* Unicode 15.1's CJK Ext. I */
    CHECK(ucd_flags(0x1f600) == 0 && ucd_flags(0x110000) == 0 && ucd_flags(0x85) == UCD_SPACE);
    return test_report("test_pretok");
}
