/* cuda_ops: every CUDA backend op against the CPU backend (make
 * test-cuda; needs a GPU), family by family; the harness and the
 * tolerances are in ops_harness.h, each family's checks in ops_FAMILY.c.
 *
 *   cuda_ops [FAMILY...]     every family, or those named (in this order
 *                            whatever the order given): embed, norm,
 *                            elementwise, rope, matmul, attention, topk,
 *                            graph, hybrid
 *
 * The backends under test are the defaults, whatever the caller's
 * environment says (GEM_CUDA_MMA excepted: tests/cuda/run.sh runs the
 * binary once with each prefill path); the variants a family compares
 * against set their variable explicitly. */
#include "ops_harness.h"

static const struct {
    const char *name;
    void (*run)(const backend_opts *g);
} families[] = {
    {"embed", ops_embed}, {"norm", ops_norm},           {"elementwise", ops_elementwise}, {"rope", ops_rope},
    {"matmul", ops_matmul}, {"attention", ops_attention}, {"topk", ops_topk},                {"graph", ops_graph},
    {"hybrid", ops_hybrid},
};
#define N_FAMILIES (int)(sizeof families / sizeof families[0])

int main(int argc, char **argv) {
    int want[N_FAMILIES];
    for (int f = 0; f < N_FAMILIES; f++) want[f] = argc < 2;
    for (int i = 1; i < argc; i++) {
        int f = 0;
        while (f < N_FAMILIES && strcmp(argv[i], families[f].name)) f++;
        if (f == N_FAMILIES) {
            fprintf(stderr, "usage: cuda_ops [FAMILY...] (families: embed, norm, elementwise, rope, matmul, "
                            "attention, topk, graph, hybrid)\n");
            return 2;
        }
        want[f] = 1;
    }
    gem_err err;
    backend_opts ref = {.threads = 1, .reference = 1}, fast = {.threads = 2}, g = {0};
    static const char *const switches[] = {"GEM_CUDA_MV_SPLIT", "GEM_CUDA_MMH",       "GEM_CUDA_ATTN_DEC",
                                           "GEM_CUDA_MV_STAGGER", "GEM_CUDA_NORM_WIDE", "GEM_CUDA_MV_LEVELS",
                                           "GEM_CUDA_ATTN_FUSE", "GEM_CUDA_KQ_F16",    "GEM_CUDA_KQ_NORM",
                                           "GEM_CUDA_GDN_CHUNKED"};
    for (size_t i = 0; i < sizeof switches / sizeof switches[0]; i++) unsetenv(switches[i]);
    cpu_ref = backend_create("cpu", &ref, &err);
    cpu_fast = backend_create("cpu", &fast, &err);
    gpu = backend_create("cuda", &g, &err);
    gpu_f16 = gpu ? backend_create("cuda", &g, &err) : NULL;
    if (gpu_f16) mark_f16(gpu_f16);
    int attention = 0; /* the attention family also runs the other one-token kernels */
    for (int f = 0; f < N_FAMILIES; f++) attention |= want[f] && families[f].run == ops_attention;
    if (gpu && attention) {
        gpu_split = variant("GEM_CUDA_ATTN_DEC", "0", &g);
        gpu_split_f16 = variant_f16("GEM_CUDA_ATTN_DEC", "0", &g);
        gpu_reg = variant("GEM_CUDA_ATTN_DEC", "1", &g);
        gpu_reg_f16 = variant_f16("GEM_CUDA_ATTN_DEC", "1", &g);
        gpu_staged_f16 = variant_f16("GEM_CUDA_ATTN_DEC", "2", &g);
    }
    if (!gpu) {
        fprintf(stderr, "cuda_ops: %s\n", err.msg);
        printf("cuda_ops: 0 passed, 1 failed\n");
        return 1;
    }
    progress(NULL); /* the clock starts */
    for (int f = 0; f < N_FAMILIES; f++)
        if (want[f]) {
            families[f].run(&g);
            progress(families[f].name);
        }
    CHECKF(gpu->status(gpu, &err) == 0, "%s", err.msg);
    gpu->destroy(gpu);
    backend *variants[] = {gpu_f16, gpu_split, gpu_split_f16, gpu_reg, gpu_reg_f16, gpu_staged_f16};
    for (int i = 0; i < 6; i++) variant_done(variants[i]);
    cpu_ref->destroy(cpu_ref);
    cpu_fast->destroy(cpu_fast);
    return test_report("cuda_ops");
}
