"""Agent loops: recorded runs read as steps, their working trees rebuilt in isolation,
and every decision of a run replayed beside what its harness sent (issue 20)."""
