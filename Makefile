# dpc — build, test, install.  `make` builds bin/dpc and bin/dprun; `make test`
# builds and runs the whole suite; `make test SANITIZE=1` does it again under
# AddressSanitizer + UBSan in a separate build tree.

CC       ?= cc
PREFIX   ?= /usr/local
CUDA_HOME ?= /usr/local/cuda
SANITIZE ?=

ifeq ($(SANITIZE),1)
BUILD    := build/asan
BIN      := build/asan/bin
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT      := -O1 -g
else
BUILD    := build/rel
BIN      := bin
SANFLAGS :=
OPT      := -O2 -g
endif

CPPFLAGS := -I. -I$(BUILD)/gen -D_GNU_SOURCE
CFLAGS   := -std=c11 -Wall -Wextra -Werror $(OPT) $(SANFLAGS) -pthread
LDLIBS   := -lopenblas -lm -ldl -lpthread

# CUDA is optional: with the toolkit present the cuda backend is compiled in
# (libcuda itself is loaded at run time, so binaries start without a driver).
HAVE_CUDA := $(shell test -f $(CUDA_HOME)/include/nvrtc.h && echo 1)
ifeq ($(HAVE_CUDA),1)
CPPFLAGS += -DDPC_HAVE_CUDA -isystem $(CUDA_HOME)/include
LDLIBS   += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lnvrtc
endif

include mk/mpi.mk

LIB_DIRS := frontend ir format passes codegen runtime driver
# Sources and headers at any depth (runtime/ has a folder per room).
LIB_SRCS := $(sort $(shell find $(LIB_DIRS) -name '*.c'))
GEN_SRCS := $(BUILD)/gen/lexer.c $(BUILD)/gen/parser.c
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o) $(BUILD)/gen/lexer.o $(BUILD)/gen/parser.o
TEST_SRCS := $(wildcard tests/unit/test_*.c)
TEST_BINS := $(TEST_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
HEADERS  := $(shell find $(LIB_DIRS) cli -name '*.h') $(BUILD)/gen/parser.h
DEPS_OK  := build/.deps-ok

.PHONY: all test install clean run deps fuzz article format format-check
# Keep objects of the CLI mains so a second `make` relinks nothing.
.SECONDARY:
all: $(BIN)/dpc $(BIN)/dprun

$(DEPS_OK):
	@scripts/deps.sh
ifneq ($(HAVE_CUDA),1)
	@echo "note: no CUDA toolkit at $(CUDA_HOME) (set CUDA_HOME): building the CPU backend only"
endif
	@mkdir -p build && touch $@

deps:
	@scripts/deps.sh

$(BUILD)/gen/parser.c $(BUILD)/gen/parser.h &: frontend/parser.y | $(DEPS_OK)
	@mkdir -p $(@D)
	bison -Wall -Werror --defines=$(BUILD)/gen/parser.h -o $(BUILD)/gen/parser.c $<

$(BUILD)/gen/lexer.c: frontend/lexer.l $(BUILD)/gen/parser.h | $(DEPS_OK)
	@mkdir -p $(@D)
	flex -o $@ $<

# Generated code is not ours to keep warning-free in every detail.
$(BUILD)/gen/%.o: $(BUILD)/gen/%.c $(HEADERS)
	$(CC) $(CPPFLAGS) $(CFLAGS) -Wno-unused-function -Wno-sign-compare -c -o $@ $<

$(BUILD)/%.o: %.c $(HEADERS) | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

$(BUILD)/libdpc.a: $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BIN)/%: $(BUILD)/cli/%.o $(BUILD)/libdpc.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# The reference interpreter is the tests' oracle: linked into the unit
# tests and the parity tools, never into libdpc.
ORACLE := $(BUILD)/liboracle.a
$(BUILD)/oracle/%.o: tests/oracle/%.c tests/oracle/interp.h $(HEADERS) | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<
$(ORACLE): $(BUILD)/oracle/interp.o
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/tests/%: tests/unit/%.c $(ORACLE) $(BUILD)/libdpc.a $(HEADERS) tests/harness.h tests/fixture.h tests/graphs.h tests/passcheck.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(ORACLE) $(BUILD)/libdpc.a $(LDLIBS)

test: all $(TEST_BINS)
	@tests/run.sh $(BUILD) $(BIN)

run: all
	@scripts/run.sh

# The article's three runs, table and plot: `make article ARGS='--epochs 1'`.
article: all
	@DPC_BIN=$(BIN) scripts/article.sh $(ARGS)

# libFuzzer targets (clang): FUZZ_TIME seconds each, default 60.
fuzz:
	@scripts/fuzz.sh

install: all
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(BIN)/dpc $(BIN)/dprun $(DESTDIR)$(PREFIX)/bin/

clean:
	rm -rf build bin

# Style is .clang-format's: `make format` applies it, `make format-check`
# (run by CI) fails on the first file that differs, naming it.
FORMAT_SRCS = $(shell git ls-files '*.c' '*.h' 2>/dev/null)
format: | $(DEPS_OK)
	clang-format -i $(FORMAT_SRCS)
format-check: | $(DEPS_OK)
	@clang-format --dry-run -Werror $(FORMAT_SRCS)

# ---- the PyTorch parity drivers (tests/parity_test.sh runs them) ----------------
PARITY_TOOLS := $(BUILD)/parity/dpc_step $(BUILD)/parity/dpc_bisect
test: $(PARITY_TOOLS)
$(BUILD)/parity/%: tests/parity/%.c $(ORACLE) $(BUILD)/libdpc.a $(HEADERS)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(ORACLE) $(BUILD)/libdpc.a $(LDLIBS)

# ---- CUDA: device-check tools and the fake driver (issue 7) -------------------
# tests/gpu/check.sh builds and runs the tools on a GPU machine (`make
# gpu-tools`); `make test` builds them too, so they keep compiling where there
# is no GPU. libfakecuda.so stands in for libcuda + libcublas on the host
# (tests/unit/test_cuda_fake.c loads it; it needs the toolkit's headers).
GPU_TOOLS := $(BUILD)/gpu/cuda_check
.PHONY: gpu-tools
gpu-tools: $(GPU_TOOLS)
test: $(GPU_TOOLS)
$(BUILD)/gpu/%: tests/gpu/%.c $(BUILD)/libdpc.a $(HEADERS)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libdpc.a $(LDLIBS)
#
# `make fake` builds it: libcuda + libcublas + libnccl in one library whose
# kernels run their CUDA source under the simulator (tests/sim, C++: the
# library links with g++). Kernel objects are built at run time with g++
# against FAKE_SIM_DIR's headers (DPC_FAKE_SIM_DIR overrides it).
.PHONY: fake
fake: $(BUILD)/fake/libfakecuda.so
ifeq ($(HAVE_CUDA),1)
test: $(BUILD)/fake/libfakecuda.so
endif
SIM_HEADERS := tests/sim/sim.h tests/sim/cuda_sim.h
$(BUILD)/fake/sim.o: tests/sim/sim.cpp $(SIM_HEADERS) | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CXX) -std=c++17 -Wall -Wextra -Werror $(OPT) $(SANFLAGS) -fPIC -pthread -Itests/sim -c -o $@ $<
$(BUILD)/fake/fake_cuda.o: tests/fake/fake_cuda.c $(SIM_HEADERS) $(HEADERS) | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -Itests/sim -DFAKE_SIM_DIR='"$(abspath tests/sim)"' -fPIC -c -o $@ $<
$(BUILD)/fake/libfakecuda.so: $(BUILD)/fake/fake_cuda.o $(BUILD)/fake/sim.o
	$(CXX) $(SANFLAGS) -pthread -shared -o $@ $^ -lopenblas -ldl
# ---- end of the CUDA block ------------------------------------------------------
