# The cuBLASLt and NCCL stand-ins (docs/cuda-standins.md), included by tests/standins/CMakeLists.txt
# after the driver stand-in: libcublasLt.so.13 over runtime/device/device_gemm.c and libnccl.so.2
# over MPI, both into ${HYP_STANDIN_DIR} beside libcuda.so.1, which they link (DT_NEEDED
# libhypsi_cuda.so.1, found through rpath $ORIGIN). Each exports exactly the API symbols
# dev_cuda.c dlsyms (a version script), nothing of the runtime code linked into it.

# The device layer's reference GEMM and its validation, compiled into the stand-in (device.c is
# self-contained: gemm rules, bf16/tf32 rounding); the rest comes from hyp_core, hidden.
add_library(hyp_cublaslt_standin SHARED cublaslt_standin.c ${HYP_SOURCE_DIR}/runtime/device/device_gemm.c
            ${HYP_SOURCE_DIR}/runtime/device/device.c)
set_target_properties(hyp_cublaslt_standin PROPERTIES
  OUTPUT_NAME cublasLt SUFFIX ".so.13" PREFIX "lib"
  LIBRARY_OUTPUT_DIRECTORY ${HYP_STANDIN_DIR}
  NO_SONAME ON BUILD_RPATH "$ORIGIN" INSTALL_RPATH "$ORIGIN" BUILD_WITH_INSTALL_RPATH ON
  C_STANDARD 11)
target_include_directories(hyp_cublaslt_standin PRIVATE ${CMAKE_CURRENT_SOURCE_DIR} ${HYP_SOURCE_DIR}/runtime/device ${HYP_SOURCE_DIR}/runtime/coll
                           ${HYP_CUBLASLT_INCLUDE})
target_link_libraries(hyp_cublaslt_standin PRIVATE hyp_cuda_standin hyp_core OpenMP::OpenMP_C Threads::Threads)
target_link_options(hyp_cublaslt_standin PRIVATE -Wl,--exclude-libs,ALL -Wl,-z,defs -Wl,-soname,libcublasLt.so.13
  -Wl,--version-script,${CMAKE_CURRENT_SOURCE_DIR}/cublaslt_standin.map)
set_target_properties(hyp_cublaslt_standin PROPERTIES LINK_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/cublaslt_standin.map)

if(MPI_C_FOUND AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/nccl_standin.c)
  add_library(hyp_nccl_standin SHARED nccl_standin.c)
  set_target_properties(hyp_nccl_standin PROPERTIES
    OUTPUT_NAME nccl SUFFIX ".so.2" PREFIX "lib"
    LIBRARY_OUTPUT_DIRECTORY ${HYP_STANDIN_DIR}
    NO_SONAME ON BUILD_RPATH "$ORIGIN" INSTALL_RPATH "$ORIGIN" BUILD_WITH_INSTALL_RPATH ON
    C_STANDARD 11)
  target_include_directories(hyp_nccl_standin PRIVATE ${CMAKE_CURRENT_SOURCE_DIR} ${HYP_CUBLASLT_INCLUDE} ${HYP_NCCL_INCLUDE})
  target_link_libraries(hyp_nccl_standin PRIVATE hyp_cuda_standin hyp_core MPI::MPI_C Threads::Threads)
  target_link_options(hyp_nccl_standin PRIVATE -Wl,--exclude-libs,ALL -Wl,-z,defs -Wl,-soname,libnccl.so.2
    -Wl,--version-script,${CMAKE_CURRENT_SOURCE_DIR}/nccl_standin.map)
  set_target_properties(hyp_nccl_standin PROPERTIES LINK_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/nccl_standin.map)
endif()

# The stand-ins' rules, each seen refusing a planted violation, and dev_cuda.c's GEMM and NCCL
# call sequences on them.
add_executable(test_standin_lt test_standin_lt.c)
target_include_directories(test_standin_lt PRIVATE ${CMAKE_CURRENT_SOURCE_DIR} ${HYP_CUBLASLT_INCLUDE})
target_link_libraries(test_standin_lt PRIVATE hyp_runtime ${CMAKE_DL_LIBS} Threads::Threads)
target_compile_definitions(test_standin_lt PRIVATE HYP_SOURCE_DIR="${HYP_SOURCE_DIR}" HYP_STANDIN_DIR="${HYP_STANDIN_DIR}")
add_dependencies(test_standin_lt hyp_cuda_standin hyp_cublaslt_standin)
add_test(NAME test_standin_lt COMMAND test_standin_lt WORKING_DIRECTORY ${HYP_SOURCE_DIR})
set_tests_properties(test_standin_lt PROPERTIES LABELS standin)

if(MPI_C_FOUND AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/test_standin_nccl.c)
  add_executable(test_standin_nccl test_standin_nccl.c)
  target_include_directories(test_standin_nccl PRIVATE ${CMAKE_CURRENT_SOURCE_DIR} ${HYP_CUBLASLT_INCLUDE} ${HYP_NCCL_INCLUDE})
  target_link_libraries(test_standin_nccl PRIVATE hyp_runtime MPI::MPI_C ${CMAKE_DL_LIBS})
  target_compile_definitions(test_standin_nccl PRIVATE HYP_STANDIN_DIR="${HYP_STANDIN_DIR}")
  add_dependencies(test_standin_nccl hyp_cuda_standin hyp_nccl_standin)
  add_test(NAME test_standin_nccl COMMAND mpirun -np 2 --oversubscribe $<TARGET_FILE:test_standin_nccl>
           WORKING_DIRECTORY ${HYP_SOURCE_DIR})
  set_tests_properties(test_standin_nccl PROPERTIES LABELS standin TIMEOUT 120 PASS_REGULAR_EXPRESSION "rank 1/2: [0-9]+ passed, 0 failed"
    FAIL_REGULAR_EXPRESSION "FAIL"
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")
  # the same injected fault met by an event synchronize (dev_cuda polls NCCL's asynchronous error there too)
  add_test(NAME test_standin_nccl_event COMMAND mpirun -np 2 --oversubscribe $<TARGET_FILE:test_standin_nccl>
           WORKING_DIRECTORY ${HYP_SOURCE_DIR})
  set_tests_properties(test_standin_nccl_event PROPERTIES LABELS standin TIMEOUT 120 PASS_REGULAR_EXPRESSION "rank 1/2: [0-9]+ passed, 0 failed"
    FAIL_REGULAR_EXPRESSION "FAIL"
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;HYP_TEST_FAULT_VIA=event")
endif()
