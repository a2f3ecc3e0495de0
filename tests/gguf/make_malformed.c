/* Writes the malformed-GGUF corpus (tests/gguf/malformed.h) into a folder,
 * with an EXPECTED file: "name level expected-substring" per line. */
#include <stdio.h>

#include "gguf/malformed.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: make_malformed DIR\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/EXPECTED", argv[1]);
    FILE *ex = fopen(path, "w");
    if (!ex) { perror(path); return 1; }
    mcase c;
    mbuf b;
    int n = 0;
    for (int i = 0; malformed_case(i, &c, &b); i++, n++) {
        snprintf(path, sizeof path, "%s/%02d_%s.gguf", argv[1], i, c.name);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(b.p, 1, b.n, f) != b.n || fclose(f)) { perror(path); return 1; }
        fprintf(ex, "%02d_%s.gguf\t%s\t%s\n", i, c.name, c.level, c.expect);
        free(b.p);
    }
    fclose(ex);
    /* the valid base, as a fuzzing seed */
    mspec base = mspec_base();
    b = mspec_build(&base);
    snprintf(path, sizeof path, "%s/../seeds/valid_small.gguf", argv[1]);
    FILE *vf = fopen(path, "wb");
    if (!vf || fwrite(b.p, 1, b.n, vf) != b.n || fclose(vf)) { perror(path); return 1; }
    free(b.p);
    printf("wrote %d malformed files to %s\n", n, argv[1]);
    return 0;
}
