# Integration tests of the runtime (test_runtime.py): examples/fashion_mnist in real
# processes under `dlrun local`. Included from test/integration/CMakeLists.txt.
if(TARGET fashion_mnist)
  dlrun_integration_test(test_runtime ElasticResume TIMEOUT 240 LABELS runtime)
  dlrun_integration_test(test_runtime RankSignals TIMEOUT 120 LABELS runtime)
  dlrun_integration_test(test_runtime CheckpointFallback TIMEOUT 120 LABELS runtime)
  dlrun_integration_test(test_runtime InitErrors TIMEOUT 60 LABELS runtime)
endif()
if(TARGET fashion_mnist)
  # The full training set, twice: 15-80 s on two cores; the limit is for a hang, not a pace.
  dlrun_integration_test(test_runtime Accuracy TIMEOUT 900 LABELS runtime)
endif()
if(TARGET fashion_mnist)
  dlrun_integration_test(test_adaptive AdaptiveTraining TIMEOUT 300 LABELS runtime)
  dlrun_integration_test(test_adaptive SleptStepCost TIMEOUT 300 LABELS runtime)
  dlrun_integration_test(test_adaptive SgdOptimizer TIMEOUT 300 LABELS runtime)
endif()
if(TARGET dlrun_synthetic)
  # The synthetic workload on fake GPUs: about 10 s on two busy cores.
  dlrun_integration_test(test_synthetic SyntheticWorkload TIMEOUT 300 LABELS runtime)
  # dlrun history: what a run's adaptive batch decided, and its picture.
  dlrun_integration_test(test_synthetic History TIMEOUT 300 LABELS runtime)
endif()
if(TARGET dlrun_synthetic)
  # The goodput scheduler with runtime jobs: A grows, shrinks for B, grows back, exactly.
  dlrun_integration_test(test_scheduler_runtime RuntimeJobs TIMEOUT 400 LABELS runtime)
endif()
if(TARGET dlrun_python)
  # import dlrun: examples/python_adaptive under the C++ example's elastic tests, adaptive
  # resizes with micro-batches, and errors as Python exceptions (test_python.py).
  dlrun_integration_test(test_python ElasticResume TIMEOUT 240 LABELS runtime python)
  dlrun_integration_test(test_python RankSignals TIMEOUT 120 LABELS runtime python)
  dlrun_integration_test(test_python ResizeDuringTraining TIMEOUT 300 LABELS runtime python)
  dlrun_integration_test(test_python AdaptiveResize TIMEOUT 300 LABELS runtime python)
  dlrun_integration_test(test_python Errors TIMEOUT 400 LABELS runtime python)
  dlrun_integration_test(test_python SharedVector TIMEOUT 300 LABELS runtime python)
endif()
