/* The Unicode properties byte-level pre-tokenizers test, per code point:
 * general category L (letter), M (mark), N (number), and the White_Space
 * property, as the pinned reference's tables hold them (Unicode 15.1).
 * Generated data in unicode_tab.c (tools/gen_unicode_tab.py). */
#ifndef GEM_TOK_UNICODE_TAB_H
#define GEM_TOK_UNICODE_TAB_H

#include <stdint.h>

enum { UCD_LETTER = 1, UCD_MARK = 2, UCD_NUMBER = 4, UCD_SPACE = 8 };

extern const uint8_t tok_ucd_stage1[0x1100];
extern const uint8_t tok_ucd_stage2[][256];

/* The flags of a code point; 0 above U+10FFFF. */
static inline unsigned ucd_flags(uint32_t cp) {
    return cp < 0x110000 ? tok_ucd_stage2[tok_ucd_stage1[cp >> 8]][cp & 255] : 0;
}

#endif
