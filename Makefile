# dpc — build, test, install.
#
#   make             bin/dpc and bin/dprun (installs what the build needs: scripts/deps.sh build)
#   make run         builds, compiles ResNet-18 and trains it (scripts/run.sh)
#   make check       the edit loop: unit tests, golden errors, the CLI tests
#   make test        the README's test command and CI's: every kind of check,
#                    on a representative subset (installs the test packages too)
#   make test-full   everything: every model through the simulator, NVRTC and
#                    parity, the longer training runs, the numeric programs
#                    under other CPUs' OpenBLAS and oneDNN kernels, and the
#                    tree built with clang-14 and clang-16
#   make CC=clang-14 BUILD=build/clang-14 BIN=build/clang-14/bin CONFIGURE=0
#                    another compiler in a tree of its own, with the suite's
#                    configuration (tests/clang_build_test.sh)
#   make test SANITIZE=1   the sanitizer suite (ASan + UBSan, build/asan): the
#                    host code paths they can judge (tests/run.sh --sanitize)
#   make install     binaries, models, dpc-plot, docs and man pages under
#                    PREFIX (default /usr/local; DESTDIR for staging); make uninstall
#
# Optional parts are found after the dependencies are installed: make runs
# scripts/configure.sh on every invocation and includes what it writes
# (build/config.mk), restarting when that changes. Every object of a build
# tree depends on the tree's flags stamp, so no binary mixes objects built
# with different features. MPI=0 leaves MPI out; DEPS=0 skips the package
# check (a machine without a package manager, tests/gpu/check.sh).

CC       ?= cc
CXX      ?= g++
PREFIX   ?= /usr/local
CUDA_HOME ?= /usr/local/cuda
SANITIZE ?=
MPI      ?= 1
CUDA     ?= 1
DNNL     ?= 1
IMAGES   ?= 1
DEPS     ?= 1
JOBS     ?= 2
RUNFLAGS :=
.DEFAULT_GOAL := all

ifeq ($(SANITIZE),1)
BUILD    := build/asan
BIN      := build/asan/bin
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT      := -O1 -g
RUNFLAGS := --sanitize
else ifeq ($(SANITIZE),thread)
BUILD    := build/tsan
BIN      := build/tsan/bin
SANFLAGS := -fsanitize=thread
OPT      := -O1 -g
else
BUILD    := build/rel
BIN      := bin
SANFLAGS :=
OPT      := -O2 -g
endif

CPPFLAGS := -I. -I$(BUILD)/gen -D_GNU_SOURCE
# WERROR=0 leaves warnings warnings: tests/gpu/check.sh retries with it a
# build that a newer compiler fails on warnings alone, and says so.
WERROR   ?= 1
WFLAGS   := -Wall -Wextra $(if $(filter 0,$(WERROR)),,-Werror)
CFLAGS   := -std=c11 $(WFLAGS) $(OPT) $(SANFLAGS) -pthread
LDLIBS   := -lopenblas -lm -ldl -lpthread

# ---- configuration: deps, then detection --------------------------------------
CONFIG := build/config.mk
NO_CONFIG_GOALS := clean deps deps-test format format-check man uninstall
ifneq ($(MAKECMDGOALS),)
ifeq ($(filter-out $(NO_CONFIG_GOALS),$(MAKECMDGOALS)),)
SKIP_CONFIG := 1
endif
endif
ifneq ($(SKIP_CONFIG),1)
include $(CONFIG)
endif
.PHONY: FORCE
# Once per invocation: a restart (after config.mk changed) detects nothing new,
# nor does the sub-make that builds the TSan tree (CONFIGURE=0).
# A test goal installs the tests' packages first, so that what they add
# (g++ for the fake driver) is found in the same run.
CONFIGURE ?= 1
TEST_GOALS := check check-bins test test-full test-bins tsan-bins fake gpu-tools
DEPS_FOR := $(if $(filter $(TEST_GOALS),$(MAKECMDGOALS)),test,build)
ifeq ($(MAKE_RESTARTS)$(CONFIGURE),1)
$(CONFIG): FORCE
	@$(if $(filter 1,$(DEPS)),MPI=$(MPI) DNNL=$(DNNL) IMAGES=$(IMAGES) scripts/deps.sh $(DEPS_FOR))
	@CUDA=$(CUDA) CUDA_HOME=$(CUDA_HOME) MPI=$(MPI) DNNL=$(DNNL) IMAGES=$(IMAGES) CC=$(CC) CXX=$(CXX) scripts/configure.sh $@
endif
deps:
	@MPI=$(MPI) DNNL=$(DNNL) IMAGES=$(IMAGES) scripts/deps.sh build
# The goals that skip configuration (format, format-check) still need the
# tests' packages; a test goal had them installed before detection.
deps-test:
	@$(if $(filter 1,$(DEPS)),MPI=$(MPI) scripts/deps.sh test)

# The cuda backend is compiled in everywhere (CUDA=0 leaves it out): it needs
# no CUDA header and links no CUDA library. The driver, NVRTC, cuBLAS, NCCL
# and cuDNN are found and loaded at run time (runtime/cuda/loader.h), so
# binaries start without them and `dprun --device cuda --info` says what is
# missing.
ifeq ($(HAVE_CUDA),1)
CPPFLAGS += -DDPC_HAVE_CUDA
endif
# MPI likewise: the `mpi` collective, and `mpirun -np P dprun PLAN --gpus N`.
# -isystem: MPI's headers are not ours to keep -Wextra clean.
ifeq ($(HAVE_MPI),1)
CPPFLAGS += -DDPC_HAVE_MPI $(patsubst -I%,-isystem %,$(filter -I%,$(MPI_CFLAGS)))
LDLIBS   += $(MPI_LIBS)
endif

# oneDNN: the cpu backend's library convolutions (runtime/device/onednn.c),
# its header at build time, libdnnl.so.2 loaded on first use; DNNL=0 leaves
# it out, and those calls run their im2col alternative. The ASan tree leaves
# it out too: at exit GCC 12's LeakSanitizer crashes scanning the dynamic TLS
# that the dlopen'd library (and its libgomp) gives threads still alive.
ifeq ($(HAVE_DNNL),1)
ifneq ($(SANITIZE),1)
CPPFLAGS += -DDPC_HAVE_DNNL
endif
endif

# libjpeg-turbo and libpng: the image-folder dataset and `dprun predict`
# (runtime/data/image.c); IMAGES=0 leaves them out, and those then say so.
ifeq ($(HAVE_IMAGE),1)
CPPFLAGS += -DDPC_HAVE_IMAGE
LDLIBS   += -ljpeg -lpng
endif

# The flags stamp: rewritten only when this tree's compilers, flags or
# features change, and every object and link depends on it.
STAMP := $(BUILD)/flags.stamp
STAMP_TEXT := $(CC) $(CXX) $(CPPFLAGS) $(CFLAGS) $(LDLIBS)
$(STAMP): FORCE
	@mkdir -p $(@D)
	@if [ "$$(cat $@ 2>/dev/null)" != '$(STAMP_TEXT)' ]; then echo '$(STAMP_TEXT)' >$@; fi

LIB_DIRS := base frontend ir format passes codegen runtime driver
# Sources and headers at any depth (runtime/ has a folder per room).
LIB_SRCS := $(sort $(shell find $(LIB_DIRS) -name '*.c'))
GEN_SRCS := $(BUILD)/gen/lexer.c $(BUILD)/gen/parser.c
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o) $(BUILD)/gen/lexer.o $(BUILD)/gen/parser.o
TEST_SRCS := $(wildcard tests/unit/test_*.c)
TEST_BINS := $(TEST_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
HEADERS  := $(shell find $(LIB_DIRS) cli -name '*.h') $(BUILD)/gen/parser.h
TEST_HEADERS := tests/harness.h tests/fixture.h tests/graphs.h tests/passcheck.h

.PHONY: all check check-bins test test-full test-bins install uninstall man clean run deps deps-test fuzz article format format-check
# Keep objects of the CLI mains so a second `make` relinks nothing.
.SECONDARY:
all: $(BIN)/dpc $(BIN)/dprun

# The generated sources do not depend on the flags (no stamp): a machine
# without flex/bison may carry them (tests/gpu/check.sh).
$(BUILD)/gen/parser.c $(BUILD)/gen/parser.h &: frontend/parser.y
	@mkdir -p $(@D)
	bison -Wall -Werror --defines=$(BUILD)/gen/parser.h -o $(BUILD)/gen/parser.c $<

$(BUILD)/gen/lexer.c: frontend/lexer.l $(BUILD)/gen/parser.h
	@mkdir -p $(@D)
	flex -o $@ $<

# Generated code is not ours to keep warning-free in every detail (clang
# 15+ finds bison's yynerrs set but never read).
$(BUILD)/gen/%.o: $(BUILD)/gen/%.c $(HEADERS) $(STAMP)
	$(CC) $(CPPFLAGS) $(CFLAGS) -Wno-unused-function -Wno-sign-compare -Wno-unused-but-set-variable -c -o $@ $<

$(BUILD)/%.o: %.c $(HEADERS) $(STAMP)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

$(BUILD)/libdpc.a: $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BIN)/%: $(BUILD)/cli/%.o $(BUILD)/libdpc.a $(STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $(filter %.o %.a,$^) $(LDLIBS)

# The reference interpreter is the tests' oracle: linked into the unit
# tests and the parity tools, never into libdpc.
ORACLE := $(BUILD)/liboracle.a
$(BUILD)/oracle/%.o: tests/oracle/%.c tests/oracle/interp.h $(HEADERS) $(STAMP)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<
$(ORACLE): $(BUILD)/oracle/interp.o
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/tests/%: tests/unit/%.c $(ORACLE) $(BUILD)/libdpc.a $(HEADERS) $(TEST_HEADERS) $(STAMP)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(ORACLE) $(BUILD)/libdpc.a $(LDLIBS)

# ---- the suite: three tiers, one runner (tests/run.sh: each program's
# header says its tier; JOBS programs at a time) ---------------------------------
# check builds only what its tier runs (no TSan tree, no parity or GPU tools).
check-bins: all $(TEST_BINS)
test-bins: check-bins
check: check-bins
	@tests/run.sh -j$(JOBS) --tier check $(RUNFLAGS) $(BUILD) $(BIN)
test: test-bins
	@tests/run.sh -j$(JOBS) --tier test $(RUNFLAGS) $(BUILD) $(BIN)
test-full: test-bins
	@tests/run.sh -j$(JOBS) --tier full $(RUNFLAGS) $(BUILD) $(BIN)

# ThreadSanitizer: one instrumented build of the library per tree
# (build/tsan), shared by the tests/*tsan_test.sh scripts. Not under
# SANITIZE=1: ASan and TSan do not mix, and the sanitizer suite leaves them out.
TSAN_BINS := test_collective test_replicas test_pipeline pool_tsan_main
ifeq ($(SANITIZE),)
test-bins: tsan-bins
endif
.PHONY: tsan-bins
tsan-bins:
	@$(MAKE) --no-print-directory SANITIZE=thread CONFIGURE=0 $(TSAN_BINS:%=build/tsan/tests/%)

run: all
	@scripts/run.sh

# The article's three runs, table and plot: `make article ARGS='--epochs 1'`.
article: all
	@DPC_BIN=$(BIN) scripts/article.sh $(ARGS)

# libFuzzer targets (clang): FUZZ_TIME seconds each, default 60.
fuzz:
	@scripts/fuzz.sh

# ---- install: under $(DESTDIR)$(PREFIX) (PREFIX default /usr/local) ------------
# The binaries read nothing of this tree at run time: dprun renders its
# kernels from the plan, $CC compiles them into the kernel cache, and the
# CUDA libraries are found when it starts; so the installed copies run from
# anywhere. Models go to share/dpc/models, scripts/plot to bin/dpc-plot,
# scripts/convert_weights.py to bin/dpc-convert,
# README.md and docs/ to share/doc/dpc (their links kept), and the man
# pages, made from docs/cli.md by scripts/man.sh, to share/man/man1.
MAN_PAGES := build/man/dpc.1 build/man/dprun.1
man: $(MAN_PAGES)
build/man/%.1: docs/cli.md scripts/man.sh driver/version.h
	@mkdir -p $(@D)
	scripts/man.sh $* docs/cli.md >$@.tmp && mv $@.tmp $@
INSTALL_DIR := $(DESTDIR)$(PREFIX)
# The install folder as one shell word whatever it holds (spaces, quotes,
# $): single-quoted, each ' as '\''. Every recipe below names it so.
IDIR := '$(subst ','\'',$(INSTALL_DIR))'
install: all $(MAN_PAGES)
	install -d $(IDIR)/bin $(IDIR)/share/dpc/models \
		$(IDIR)/share/doc/dpc/docs $(IDIR)/share/man/man1
	install -m 755 $(BIN)/dpc $(BIN)/dprun $(IDIR)/bin/
	install -m 755 scripts/plot $(IDIR)/bin/dpc-plot
	install -m 755 scripts/convert_weights.py $(IDIR)/bin/dpc-convert
	install -m 644 models/*.net $(IDIR)/share/dpc/models/
	install -m 644 README.md $(IDIR)/share/doc/dpc/
	install -m 644 docs/*.md docs/*.svg $(IDIR)/share/doc/dpc/docs/
	dest=$(IDIR); case $$dest in /*) ;; *) dest=$$PWD/$$dest ;; esac; \
	cd docs && find article -type f | while read -r f; do \
		install -D -m 644 "$$f" "$$dest/share/doc/dpc/docs/$$f" || exit 1; done
	install -m 644 $(MAN_PAGES) $(IDIR)/share/man/man1/
uninstall:
	rm -f $(IDIR)/bin/dpc $(IDIR)/bin/dprun $(IDIR)/bin/dpc-plot \
		$(IDIR)/bin/dpc-convert \
		$(IDIR)/share/man/man1/dpc.1 $(IDIR)/share/man/man1/dprun.1
	rm -rf $(IDIR)/share/dpc $(IDIR)/share/doc/dpc

clean:
	rm -rf build bin

# Style is .clang-format's: `make format` applies it, `make format-check`
# (run by CI) fails on the first file that differs, naming it.
FORMAT_SRCS = $(shell git ls-files '*.c' '*.h' 2>/dev/null)
format: | deps-test
	clang-format -i $(FORMAT_SRCS)
format-check: | deps-test
	@clang-format --dry-run -Werror $(FORMAT_SRCS)

# ---- the PyTorch parity drivers (tests/parity_test.sh runs them) ----------------
PARITY_TOOLS := $(BUILD)/parity/dpc_step $(BUILD)/parity/dpc_bisect
test-bins: $(PARITY_TOOLS)
$(BUILD)/parity/%: tests/parity/%.c $(ORACLE) $(BUILD)/libdpc.a $(HEADERS) $(STAMP)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(ORACLE) $(BUILD)/libdpc.a $(LDLIBS)

# ---- CUDA: device-check tools and the fake driver (issue 7) -------------------
# tests/gpu/check.sh builds and runs the tools on a GPU machine (`make
# gpu-tools`); the suite builds them too, so they keep compiling where there
# is no GPU. libfakecuda.so stands in for libcuda + libcublas on the host
# (tests/unit/test_cuda_fake.c loads it; it needs the toolkit's cuda.h and
# g++, so it is built only where the toolkit is: HAVE_CUDA_TOOLKIT).
GPU_TOOLS := $(BUILD)/gpu/cuda_check
ifeq ($(HAVE_CUDA)$(HAVE_CXX),11)
GPU_TOOLS += $(BUILD)/gpu/kernel_cmp
endif
.PHONY: gpu-tools
gpu-tools: $(GPU_TOOLS)
check-bins: $(GPU_TOOLS)
$(BUILD)/gpu/%: tests/gpu/%.c $(BUILD)/libdpc.a $(HEADERS) $(STAMP)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libdpc.a $(LDLIBS)
# kernel_cmp --device (tests/sim/kernel_cmp.c): every CUDA kernel call of a
# program on the GPU against its C-dialect kernel; it links the simulator
# (C++) for the modules it runs on the host.
$(BUILD)/gpu/kernel_cmp.o: tests/sim/kernel_cmp.c $(HEADERS) $(STAMP)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -Itests/sim -c -o $@ $<
# -rdynamic: the modules it loads call the simulator in the executable.
$(BUILD)/gpu/kernel_cmp: $(BUILD)/gpu/kernel_cmp.o $(BUILD)/fake/sim.o $(BUILD)/libdpc.a
	$(CXX) $(SANFLAGS) -rdynamic -pthread -o $@ $^ $(LDLIBS)
#
# `make fake` builds it: libcuda + libcublas + libnccl in one library whose
# kernels run their CUDA source under the simulator (tests/sim, C++: the
# library links with g++). Kernel objects are built at run time with g++
# against FAKE_SIM_DIR's headers (DPC_FAKE_SIM_DIR overrides it).
.PHONY: fake
fake: $(BUILD)/fake/libfakecuda.so
ifeq ($(HAVE_CUDA_TOOLKIT),1)
check-bins: $(BUILD)/fake/libfakecuda.so
endif
SIM_HEADERS := tests/sim/sim.h tests/sim/cuda_sim.h
$(BUILD)/fake/sim.o: tests/sim/sim.cpp $(SIM_HEADERS) $(STAMP)
	@mkdir -p $(@D)
	$(CXX) -std=c++17 $(WFLAGS) $(OPT) $(SANFLAGS) -fPIC -pthread -Itests/sim -c -o $@ $<
$(BUILD)/fake/fake_cuda.o: tests/fake/fake_cuda.c tests/fake/fake_math.h $(SIM_HEADERS) $(HEADERS) $(STAMP)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -isystem $(CUDA_HOME)/include -Itests/sim -DFAKE_SIM_DIR='"$(abspath tests/sim)"' -fPIC -c -o $@ $<
# fake_math.c, the fake's GEMM and convolution arithmetic, is built -O2 and
# without the sanitizers in every tree: it is test infrastructure whose
# loops run every product of ResNet-18 steps, too slow under ASan, and it
# only reads and writes buffers the instrumented code handed it whole.
# -ffp-contract=off: no fused multiply-add, so its sums are the same bits
# on every x86-64 CPU (fake_math.h's order).
$(BUILD)/fake/fake_math.o: tests/fake/fake_math.c tests/fake/fake_math.h $(HEADERS) $(STAMP)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -std=c11 $(WFLAGS) -O2 -g -ffp-contract=off -fPIC -c -o $@ $<
$(BUILD)/fake/libfakecuda.so: $(BUILD)/fake/fake_cuda.o $(BUILD)/fake/fake_math.o $(BUILD)/fake/sim.o
	$(CXX) $(SANFLAGS) -pthread -shared -o $@ $^ -ldl
# ---- end of the CUDA block ------------------------------------------------------
