/* Compares gem's Unicode property table (src/tok/unicode_tab.c) with the
 * pinned reference's on every code point: letter, mark, number and white
 * space as the reference's unicode_cpt_flags_from_cpt reports them (an
 * exported C++ function of libllama; its flags struct comes back in a
 * register as 16 bits: NUMBER 0x2, LETTER 0x4, ACCENT_MARK 0x10,
 * WHITESPACE 0x100). Prints the differences and their count; exits 1 when
 * any. Built against .ref/ by tools/ref_unicode_check.sh. */
#include <stdint.h>
#include <stdio.h>

#include "tok/unicode_tab.h"

uint16_t ref_flags(uint32_t cp) __asm__("_Z26unicode_cpt_flags_from_cptj");

int main(void) {
    unsigned bad = 0;
    for (uint32_t c = 0; c < 0x110000; c++) {
        const unsigned r = ref_flags(c);
        const unsigned want = (r & 0x4 ? UCD_LETTER : 0) | (r & 0x10 ? UCD_MARK : 0) | (r & 0x2 ? UCD_NUMBER : 0) |
                              (r & 0x100 ? UCD_SPACE : 0);
        if (want != ucd_flags(c) && bad++ < 20) printf("U+%04X: reference %x, gem %x\n", c, want, ucd_flags(c));
    }
    printf("%u code points differ\n", bad);
    return bad != 0;
}
