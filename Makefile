# gem build. `make` builds ./gem; `make test` runs every test (unit, ASan+UBSan,
# malformed corpus, fuzzers); `make run` runs the main job on the embedded
# default model. CUDA: compiled when nvcc is on the PATH or CUDA=1; CUDA=0
# forces it off.

CC      ?= cc
NVCC    ?= nvcc
CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -Wno-format-truncation \
               -ffp-contract=off -pthread -Isrc
CFLAGS  ?= -O2 -g
LDLIBS  := -lm -pthread
TEST_LDLIBS := -lm -pthread

ifeq ($(origin CUDA), undefined)
  CUDA := $(if $(shell command -v $(NVCC) 2>/dev/null),1,0)
endif

BUILD   := build
LIB_SRC := $(wildcard src/util/*.c src/quant/*.c src/gguf/*.c src/model/*.c src/tok/*.c src/chat/*.c src/backend/*.c src/backend/cpu/*.c src/backend/shard/*.c src/engine/*.c \
           src/convert/*.c src/server/*.c src/grammar/*.c)
CLI_SRC := $(wildcard src/cli/*.c)
CU_SRC  := $(wildcard src/backend/cuda/*.cu)

OBJ_DIR := $(BUILD)/obj-cuda$(CUDA)
LIB_OBJ := $(LIB_SRC:%.c=$(OBJ_DIR)/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(OBJ_DIR)/%.o)

ifeq ($(CUDA),1)
  CU_OBJ  := $(CU_SRC:%.cu=$(OBJ_DIR)/%.o)
  CUDA_HOME ?= $(patsubst %/bin/,%,$(dir $(shell command -v $(NVCC))))
  CFLAGS_BASE += -DGEM_CUDA
  LDLIBS  += -L$(CUDA_HOME)/lib64 -lcudart -Wl,-rpath,$(CUDA_HOME)/lib64
  NVFLAGS := -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc -Xcompiler -Wall,-Wextra,-Werror,-fno-exceptions,-fno-threadsafe-statics -Werror all-warnings -DGEM_CUDA
endif

# build/gem-trace: gem with the CUDA block trace compiled in (GEM_CUDA_TRACE,
# see src/backend/cuda/cuda_common.h; bench/cuda_trace.py reads its files).
# make test builds it too when CUDA is on, so the traced kernels compile.
ifeq ($(CUDA),1)
  CU_TRACE_OBJ := $(CU_SRC:%.cu=$(BUILD)/obj-cuda-trace/%.o)
  TRACE_BIN := $(BUILD)/gem-trace
endif

.PRECIOUS: %.o $(BUILD)/tok-golden/%
# The embedded default model, unpacked by the rule below `run` (defined here:
# prerequisite lists expand when make reads them).
DEFAULT_MODEL := data/models/default.gguf
DEFAULT_MTP := data/models/mtp-default.gguf

.PHONY: all flags lib-objs test test-cuda test-unit test-asan test-corpus test-fuzz run clean corpus quant-golden
all: gem $(DEFAULT_MODEL) $(DEFAULT_MTP)

# the compiler flags of this build, for benchmark records (bench/ab)
flags:
	@echo "CFLAGS=$(CFLAGS_BASE) $(CFLAGS)"
	@echo "NVFLAGS=$(NVFLAGS) $(NVEXTRA)"
	@echo "CUDA=$(CUDA)"

# gem's library objects (everything but the CLI), built, and their paths
# listed in build/lib-objs: for programs outside make test that link gem's
# code (the CUDA experiments, experiments/cuda/Makefile)
lib-objs: $(LIB_OBJ) $(CU_OBJ)
	@echo $(abspath $(LIB_OBJ) $(CU_OBJ)) > $(BUILD)/lib-objs

gem: $(LIB_OBJ) $(CLI_OBJ) $(CU_OBJ) $(BUILD)/cuda-$(CUDA).stamp
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -o $@ $(filter %.o,$^) $(LDLIBS)

$(OBJ_DIR)/%.o: %.c $(wildcard src/*/*.h src/*/*/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -c -o $@ $<

$(OBJ_DIR)/%.o: %.cu $(wildcard src/*/*.h src/*/*/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) $(NVEXTRA) -c -o $@ $<

$(BUILD)/obj-cuda-trace/%.o: %.cu $(wildcard src/*/*.h src/*/*/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) $(NVEXTRA) -DGEM_CUDA_TRACE -c -o $@ $<

$(BUILD)/gem-trace: $(LIB_OBJ) $(CLI_OBJ) $(CU_TRACE_OBJ)
	@if [ "$(CUDA)" != 1 ]; then echo "build/gem-trace needs nvcc (CUDA=1)"; exit 1; fi
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -o $@ $(filter %.o,$^) $(LDLIBS)

# ---- tests ----
TEST_SRC  := $(wildcard tests/*/test_*.c)
# GPU tests (make test-cuda, on a machine with an NVIDIA GPU): one binary
# per tests/cuda/cuda_*.c; cuda_ops also links its families' files
# (tests/cuda/ops_*.c, the harness among them)
CUDA_TEST_SRC := $(wildcard tests/cuda/cuda_*.c)
CUDA_TEST_BIN := $(CUDA_TEST_SRC:tests/%.c=$(BUILD)/tests/%)
CUDA_OPS_SRC  := $(wildcard tests/cuda/ops_*.c)
TEST_BIN  := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
ASAN_DIR  := $(BUILD)/asan
ASAN_FLAGS := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
ASAN_LIB_OBJ := $(LIB_SRC:%.c=$(ASAN_DIR)/obj/%.o)
ASAN_TEST_BIN := $(TEST_SRC:tests/%.c=$(ASAN_DIR)/tests/%)

$(BUILD)/tests/%: tests/%.c $(LIB_OBJ) $(CU_OBJ) tests/test.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -Itests -o $@ $< $(LIB_OBJ) $(CU_OBJ) $(LDLIBS)

$(BUILD)/tests/cuda/cuda_ops: tests/cuda/cuda_ops.c $(CUDA_OPS_SRC) tests/cuda/ops_harness.h $(LIB_OBJ) $(CU_OBJ) tests/test.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -Itests -o $@ $< $(CUDA_OPS_SRC) $(LIB_OBJ) $(CU_OBJ) $(LDLIBS)

# the model-level GPU checks share their decisions' helpers
$(BUILD)/tests/cuda/cuda_model $(BUILD)/tests/cuda/cuda_depth: tests/cuda/logits_check.h

# The sanitizer and fuzzer builds leave the CUDA backend out (host code only).
$(ASAN_DIR)/obj/%.o: %.c $(wildcard src/*/*.h src/*/*/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -UGEM_CUDA $(ASAN_FLAGS) -c -o $@ $<

$(ASAN_DIR)/tests/%: tests/%.c $(ASAN_LIB_OBJ) tests/test.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -UGEM_CUDA $(ASAN_FLAGS) -Itests -o $@ $< $(ASAN_LIB_OBJ) $(TEST_LDLIBS)

# gem itself under ASan+UBSan (the server tests can run against it: GEM=build/asan/gem).
ASAN_CLI_OBJ := $(CLI_SRC:%.c=$(ASAN_DIR)/obj/%.o)
$(ASAN_DIR)/gem: $(ASAN_LIB_OBJ) $(ASAN_CLI_OBJ)
	$(CC) $(CFLAGS_BASE) -UGEM_CUDA $(ASAN_FLAGS) -o $@ $^ $(TEST_LDLIBS)

# libFuzzer targets (clang): every parser gets one.
FUZZ_CC   ?= clang
FUZZ_SRC  := $(wildcard tests/*/fuzz_*.c)
FUZZ_BIN  := $(FUZZ_SRC:tests/%.c=$(BUILD)/fuzz/%)
FUZZ_SECONDS ?= 60
FUZZ_FLAGS := -Wno-unknown-warning-option -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all

$(BUILD)/fuzz/%: tests/%.c $(LIB_SRC) $(wildcard src/*/*.h src/*/*/*.h tests/*/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CFLAGS_BASE) -UGEM_CUDA $(FUZZ_FLAGS) -o $@ $< $(LIB_SRC) -lm

test: gem $(DEFAULT_MODEL) $(DEFAULT_MTP) $(TEST_BIN) $(ASAN_TEST_BIN) $(ASAN_DIR)/gem $(FUZZ_BIN) $(TRACE_BIN)
	@FUZZ_SECONDS=$(FUZZ_SECONDS) tests/run.sh

test-cuda: gem $(DEFAULT_MODEL) $(DEFAULT_MTP) $(CUDA_TEST_BIN) $(BUILD)/tests/engine/test_generate $(BUILD)/tests/engine/test_spec $(BUILD)/tests/engine/test_parallel $(BUILD)/tests/engine/test_park $(BUILD)/tests/engine/test_spec_dist $(BUILD)/tests/model/test_hf_mtp $(BUILD)/tests/model/test_mtp_ref
	@if [ "$(CUDA)" != 1 ]; then echo "make test-cuda needs nvcc (CUDA=1)"; exit 1; fi
	@tests/cuda/run.sh

test-unit: gem $(DEFAULT_MODEL) $(DEFAULT_MTP) $(TEST_BIN)
	@GEM_SKIP_ASAN=1 GEM_SKIP_FUZZ=1 tests/run.sh

# Regenerates the malformed-GGUF corpus (committed under tests/data/malformed).
corpus: $(BUILD)/tests/gguf/make_malformed
	$(BUILD)/tests/gguf/make_malformed tests/data/malformed

$(BUILD)/tests/gguf/make_malformed: tests/gguf/make_malformed.c tests/gguf/malformed.h $(LIB_OBJ) $(CU_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -Itests -o $@ $< $(LIB_OBJ) $(CU_OBJ) $(LDLIBS) $(TEST_LDLIBS)

# The embedded default model: the trained demo model (models/README.md),
# committed gzip-compressed and unpacked where gem looks for its default
# (data/models/default.gguf beside the executable).
$(DEFAULT_MODEL): models/gemma4-demo-q4_0.gguf.gz
	@mkdir -p $(dir $@)
	gzip -dc $< > $@.tmp && mv $@.tmp $@
# ... and its MTP drafter, beside it under the name gem run and gem chat
# look for (mtp-<model file>)
$(DEFAULT_MTP): models/gemma4-demo-mtp-q4_0.gguf.gz
	@mkdir -p $(dir $@)
	gzip -dc $< > $@.tmp && mv $@.tmp $@
run: gem $(DEFAULT_MODEL) $(DEFAULT_MTP)
	./gem inspect $(DEFAULT_MODEL)
	./gem run -p "In the beginning" -n 48 --temp 0

clean:
	rm -rf $(BUILD) gem

# Tokenizer goldens are committed compressed; unpack them for the tests.
TOK_GOLDEN := $(patsubst tests/data/tok/%.gz,$(BUILD)/tok-golden/%,$(wildcard tests/data/tok/*.gz))
$(BUILD)/tok-golden/%: tests/data/tok/%.gz
	@mkdir -p $(dir $@)
	gzip -dc $< > $@
test test-unit: $(TOK_GOLDEN)

# Switching CUDA on or off relinks gem.
$(BUILD)/cuda-$(CUDA).stamp:
	@mkdir -p $(BUILD)
	@rm -f $(BUILD)/cuda-*.stamp
	@touch $@
