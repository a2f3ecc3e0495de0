/* The shared contract helpers (model/manifest.h) on their own: the layer
 * order converters write, the storage types a contract takes, the
 * profile-name list. Their messages on real files are checked through each
 * contract (test_gemma4, test_qwen35). */
#include <string.h>

#include "model/manifest.h"
#include "quant/quant.h"
#include "test.h"

static void test_layer_order(void) {
    uint32_t order[12];
    mf_layer_order(order, 12);
    static const uint32_t want[12] = {0, 1, 10, 11, 2, 3, 4, 5, 6, 7, 8, 9};
    CHECK(!memcmp(order, want, sizeof want));
    mf_layer_order(order, 1);
    CHECK(order[0] == 0);
}

static void test_types(void) {
    CHECK(mf_type_allowed(1, QT_F32) && !mf_type_allowed(1, QT_F16) && !mf_type_allowed(1, QT_Q8_0));
    CHECK(mf_type_allowed(0, QT_Q4_K) && mf_type_allowed(0, QT_BF16) && mf_type_allowed(0, QT_F32));
    CHECK(!strcmp(mf_types(1), "f32"));
    CHECK(!strcmp(mf_types(0), "q4_0, q8_0, q5_0, q5_1, q4_k, q5_k, q6_k, f16, bf16 or f32"));
}

static void test_list(void) {
    char names[16] = "";
    mf_list_add(names, sizeof names, "a");
    mf_list_add(names, sizeof names, "bb");
    CHECK(!strcmp(names, "a, bb"));
    mf_list_add(names, sizeof names, "a-long-name"); /* cut at the buffer */
    CHECK(strlen(names) == sizeof names - 1 && !strncmp(names, "a, bb, a-long", 13));
}

int main(void) {
    test_layer_order();
    test_types();
    test_list();
    return test_report("test_manifest");
}
