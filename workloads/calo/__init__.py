"""A CaloChallenge-style workload: a conditional denoising diffusion model of electron showers on
the geometry of the Fast Calorimeter Simulation Challenge's dataset 2 (45 layers x 16 angular x 9
radial cells), trained and validated through burst's Workload interface like 3DGAN.

Importing the package turns oneDNN on for TensorFlow (see ``workloads.common.cpu``), as 3DGAN does.
"""

from ..common.cpu import enable_onednn

enable_onednn()
