/* See utf8.h. */
#include "util/utf8.h"

int utf8_valid(const char *s, uint64_t len) {
    const unsigned char *p = (const unsigned char *)s;
    uint64_t i = 0;
    while (i < len) {
        unsigned char b = p[i];
        if (b < 0x80) { i++; continue; }
        uint32_t cp;
        int n;
        if (b >= 0xc2 && b <= 0xdf) { n = 1; cp = b & 0x1f; }
        else if (b >= 0xe0 && b <= 0xef) { n = 2; cp = b & 0x0f; }
        else if (b >= 0xf0 && b <= 0xf4) { n = 3; cp = b & 0x07; }
        else return 0;
        if (len - i <= (uint64_t)n) return 0;
        for (int k = 1; k <= n; k++) {
            if ((p[i + k] & 0xc0) != 0x80) return 0;
            cp = (cp << 6) | (p[i + k] & 0x3f);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += (uint64_t)n + 1;
    }
    return 1;
}

