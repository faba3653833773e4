"""TFDS builders of ours: generated here (no download) or read from a manual download."""

from attention_lab.data.builders.ade20k_challenge import Ade20kChallenge
from attention_lab.data.builders.care import Care
from attention_lab.data.builders.digit_scenes import DigitScenes
from attention_lab.data.builders.digits import Digits
from attention_lab.data.builders.pascal_context import PascalContext
from attention_lab.data.builders.photos import RestorationPhotos
from attention_lab.data.builders.synthetic_volumes import SyntheticVolumes
from attention_lab.data.builders.voc_segmentation import VocSegmentation

# By TFDS name (the family; "care/planaria" names the builder config "planaria" of "care").
BUILDERS = {cls.name: cls for cls in (Digits, DigitScenes, RestorationPhotos, SyntheticVolumes,
                                      Care, VocSegmentation, Ade20kChallenge, PascalContext)}
