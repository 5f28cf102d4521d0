"""The names of 3DGAN's validation metrics, as plain data (the CLI reads them without NumPy)."""

#: Summary metrics a quality gate may bound, and what each says (all "lower is better"; the AUC is best at 0.5).
GATE_METRICS = {
    "sf_rel_error": "relative error of the sampling fraction, averaged over energy bins",
    "profile_abs_error": "energy-weighted absolute difference of the x, y, z profiles (0 = identical)",
    "moment_error": "relative error of the first and second shower moments",
    "profile_error": "the authors' per-bin relative profile error",
    "angle_rel_error": "relative error of the measured angle, event by event",
    "hits_rel_error": "relative error of the mean number of hits above 0.3 MeV",
    "transverse_worst_factor": "largest factor between GAN and MC transverse profiles, cells down to 1e-3 of the peak (1 = perfect)",
    "optimisation_metric": "the authors' model-selection metric: moment + profile + angle errors",
    "fpd": "Fréchet physics distance of the high-level features (0 = same distribution)",
    "kpd": "kernel physics distance of the high-level features (0 = same distribution)",
    "classifier_auc": "AUC of a classifier telling GAN from MC showers (0.5 = indistinguishable)",
    "energy_scale_offset": "how far the generator's raw energy response was from MC's on training events: largest |calibration scale - 1| (0 = none needed)",
}
#: What a scan can minimise: the summary metrics cheap enough to compute after every epoch (the
#: sample distances and the classifier are left to the best trial's full report).
EPOCH_METRICS = ("optimisation_metric", "sf_rel_error", "profile_abs_error", "moment_error", "profile_error", "angle_rel_error",
                 "hits_rel_error", "transverse_worst_factor")
VERDICT_METRICS = ("optimisation_metric", "sf_rel_error", "hits_rel_error", "transverse_worst_factor", "fpd", "classifier_auc")
