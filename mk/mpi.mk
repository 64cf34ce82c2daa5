# mk/mpi.mk — optional MPI, like CUDA: with OpenMPI's development files
# (Debian: libopenmpi-dev) the `mpi` collective is compiled in (-DDPC_HAVE_MPI)
# and `mpirun -np P dprun PLAN --gpus N` runs P x N replicas; without them
# everything builds and `dprun` refuses to run under mpirun with a clear
# message. `make MPI=0` builds without MPI even when it is there.
# Include after CPPFLAGS and LDLIBS are set:   include mk/mpi.mk

MPI    ?= 1
MPICC  ?= mpicc
ifeq ($(MPI),1)
# mpicc's wrapper knows OpenMPI's flags; pkg-config's ompi-c is the fallback.
MPI_CFLAGS := $(shell $(MPICC) --showme:compile 2>/dev/null || pkg-config --cflags ompi-c 2>/dev/null)
MPI_LIBS   := $(shell $(MPICC) --showme:link 2>/dev/null || pkg-config --libs ompi-c 2>/dev/null)
endif
ifneq ($(strip $(MPI_LIBS)),)
HAVE_MPI := 1
# -isystem: MPI's headers are not ours to keep -Wextra clean.
CPPFLAGS += -DDPC_HAVE_MPI $(patsubst -I%,-isystem %,$(filter -I%,$(MPI_CFLAGS)))
LDLIBS   += $(MPI_LIBS)
endif
