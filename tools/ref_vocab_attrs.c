/* Prints the token attributes the pinned reference assigns after loading a
 * vocabulary (its type heuristics included): "id attr text" for every token
 * whose attributes are not plain NORMAL. Golden input for the tokenizer's
 * attribute table. Built against .ref/ by tools/tok_golden.sh. */
#include <stdio.h>

#include "llama.h"

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    struct llama_model *m = llama_model_load_from_file(argv[1], mp);
    if (!m) return 1;
    const struct llama_vocab *v = llama_model_get_vocab(m);
    int n = llama_vocab_n_tokens(v);
    for (int i = 0; i < n; i++) {
        int a = (int)llama_vocab_get_attr(v, i);
        if (a != LLAMA_TOKEN_ATTR_NORMAL) printf("%d %d %s\n", i, a, llama_vocab_get_text(v, i));
    }
    printf("eog:");
    for (int i = 0; i < n; i++)
        if (llama_vocab_is_eog(v, i)) printf(" %d", i);
    printf("\nbos %d eos %d eot %d\n", llama_vocab_bos(v), llama_vocab_eos(v), llama_vocab_eot(v));
    llama_model_free(m);
    return 0;
}
