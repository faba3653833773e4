"""The config schema: every field of a training config and its default, per task family.

A config file starts from its family's function here (`classification()`, `segmentation()`,
`restoration()`, `gan()`, `detection()`) and sets what its experiment chooses, so every field
the library reads exists in every config of that family and is read as an attribute. A
default is the value that means "off" or the library's behaviour when nothing is chosen.

`model` holds the keyword arguments of `models.create(model.name, ...)`: the schema gives
the fields the tasks read (`dtype`, `name` but in the GAN, whose two models are fixed, and
the family's own); a config adds its model's other arguments, whose defaults are those of
the model's signature.

The run options (compilation cache, profiler) come from `presets.run_options`.
tests/train/test_paper_configs.py checks that every config holds exactly its family's
fields (its model's arguments aside).
"""

import ml_collections

from configs import presets

FAMILIES = ("classification", "segmentation", "restoration", "gan", "detection")


def optimizer(**values) -> ml_collections.ConfigDict:
  """An optimizer (train/optim.py) with every field; `values` override the defaults."""
  config = ml_collections.ConfigDict(dict(
      name="sgd",  # sgd | adam | adamw | rmsprop
      learning_rate=0.1,  # peak
      momentum=0.9,  # sgd (0: none), rmsprop
      nesterov=False,  # sgd
      b1=0.9, b2=0.999, eps=1e-8,  # adam
      weight_decay=0.0,
      decay_params="kernels",  # kernels (rank >= 2) | conv_kernels (rank 4)
      head_lr_multiplier=1.0,  # learning rate × this outside the module `backbone_name`
      backbone_name="backbone",
      grad_clip_norm=0.0,  # 0: no clipping
      mu_dtype="",  # dtype of Adam's first moment: "" = the parameters' dtype, or "bfloat16"
      schedule="constant",  # constant | step | cosine | exponential | poly
      warmup_epochs=0.0,  # linear warm-up before the schedule
      decay_epochs=(),  # step: ×decay_factor at each of these epochs
      decay_factor=0.1,  # step, exponential
      decay_every_epochs=1.0,  # exponential (staircase)
      power=0.9,  # poly: (1 − t/T)^power
  ))
  config.update(values)
  return config


def _training(task: str) -> ml_collections.ConfigDict:
  """The fields every family has."""
  config = ml_collections.ConfigDict()
  config.task = task
  config.seed = 0
  config.distributed = False  # True: jax.distributed.initialize() with auto-detection
  # A classification config file[:preset] trained first into <workdir>/pretrained, a
  # torchvision ResNet .pth, or a classification checkpoint; "": random initial weights.
  config.init_from = ""
  config.init_scope = "backbone"  # what init_from fills: the "backbone" or the whole "model"

  config.dataset = ml_collections.ConfigDict()
  config.dataset.name = ""
  config.dataset.data_dir = ""  # "": the TFDS default (~/tensorflow_datasets)
  config.dataset.manual_dir = ""  # "": <data_dir>/downloads/manual
  config.dataset.image_dir = ""  # celeb_a only: the img_align_celeba/ folder instead of TFDS
  config.dataset.train_split = "train"
  config.dataset.eval_split = "test"
  config.dataset.workers = 0  # processes decoding the input; 0: the training process itself
  config.dataset.synthetic = False  # True: device-resident random batches (speed runs)

  config.model = ml_collections.ConfigDict()
  config.model.dtype = "float32"  # compute dtype; parameters stay float32

  config.batch_size = 64  # global, over every device and process
  config.microbatches = 1  # m > 1: each step sums the gradients of m slices of the batch
  config.bn_group_size = 0  # BatchNorm statistics per group of examples; 0: the whole batch
  config.num_epochs = 0
  config.num_train_steps = 0  # 0: from num_epochs

  config.mesh = ml_collections.ConfigDict()
  config.mesh.num_devices = -1  # -1: every device, data parallel
  config.mesh.param_sharding = "replicated"

  config.log_every_steps = 50
  config.eval_every_steps = 1000
  config.checkpoint_every_steps = 1000
  config.first_checkpoint_secs = 180  # one early checkpoint after this much work
  config.keep_checkpoints = 2
  presets.run_options(config)
  return config


def classification() -> ml_collections.ConfigDict:
  """Image classification (train/tasks/classification.py, data/pipeline.py)."""
  config = _training("classification")
  config.model.name = ""
  config.dataset.image_size = 224
  config.dataset.crop = "resize"  # ImageNet: resize | inception
  config.dataset.channels = 0  # 0: the data's; 3 on grey digits: replicated to RGB
  config.label_smoothing = 0.0
  config.optimizer = optimizer()
  return config


def segmentation() -> ml_collections.ConfigDict:
  """Semantic segmentation (train/tasks/segmentation.py, data/segmentation.py)."""
  config = _training("segmentation")
  config.model.name = ""
  d = config.dataset
  d.resize = 0  # digit scenes only: resized to this before augmentation; 0: as stored
  d.crop_size = 513
  d.eval_size = 513  # evaluation canvas (padded)
  d.scale_min, d.scale_max = 0.5, 2.0  # random scaling
  d.flip = True
  # "auto": "torch" when init_from is a torch .pth, else "same" (models/resnet.py)
  config.model.padding = "auto"
  config.aux_loss_weight = 0.0  # FCN auxiliary head's loss weight; 0: no auxiliary head
  config.eval = ml_collections.ConfigDict()
  config.eval.scales = (1.0,)  # logits averaged over these scales
  config.eval.flip = False
  config.eval.window = 0  # 0: whole images; else sliding windows of this side
  config.eval.stride = 0  # 0: two thirds of the window
  config.num_summary_images = 4
  config.optimizer = optimizer()
  return config


def restoration() -> ml_collections.ConfigDict:
  """Image restoration (train/tasks/restoration.py, data/restoration.py)."""
  config = _training("restoration")
  config.model.name = ""
  d = config.dataset
  d.channels = 0  # 0: from the data
  d.patch_size = (64, 64)  # training patches, one size per spatial axis
  d.augment = False  # random flips and rotations
  d.input_percentiles = ()  # (low, high): inputs normalised by these percentiles
  config.model.depth = 3  # U-Net levels
  config.loss = "mae"  # mae | mse
  config.optimizer = optimizer()
  config.eval = ml_collections.ConfigDict()
  config.eval.protocol = "plain"  # plain | care (evaluation/restoration.py)
  config.eval.data_range = 1.0
  config.eval.percentiles = (0.1, 99.9)  # care: of the target
  config.eval.tile_size = (64, 64)  # prediction tiles, one size per spatial axis
  config.eval.tile_overlap = (8, 8)
  config.eval.max_examples = 0  # 0: every eval image
  config.eval.crop_size = ()  # (): whole images; else a centre crop (quick checks)
  return config


def gan() -> ml_collections.ConfigDict:
  """Image generation (train/tasks/gan.py, data/gan.py); the defaults are SAGAN's recipe."""
  config = _training("gan")
  config.dataset.name = "digits"
  config.dataset.image_size = 32
  config.conditional = True

  m = config.model
  m.attention = "sa"  # none | sa | refined | hamburger | conv
  m.d_attention = ""  # "": the same as G's
  m.width = 64
  m.latent_dim = 128
  m.spectral_norm = True
  m.context_side = 0  # 0: 32 (16 at resolution 32)
  m.class_embedding = 0  # 0: per-class BN table in G (SAGAN); E > 0: BigGAN
  m.hierarchical_z = False  # True: z split across G's blocks (BigGAN)
  m.minibatch_std = 0  # g > 0: D sees the std over groups of g images (ProGAN)
  m.key_pool = 1  # p > 1: sa / refined keys and values max-pooled p×p

  config.batch_size = 256
  config.num_train_steps = 1_000_000
  config.d_steps = 1
  config.ema_decay = 0.0  # 0: off (the papers' setting); BigGAN: 0.9999
  config.ema_start_step = 0
  config.mode_seeking = 0.0  # λ > 0: MSGAN's mode-seeking term in G's loss
  config.g_optimizer = optimizer(name="adam", learning_rate=1e-4, b1=0.0, b2=0.9)
  config.d_optimizer = optimizer(name="adam", learning_rate=4e-4, b1=0.0, b2=0.9)

  config.eval = ml_collections.ConfigDict()
  config.eval.features = "inception"  # inception | digits | none
  config.eval.inception_path = ""  # pt_inception-2015-12-05-6726825d.pth (pytorch-fid)
  config.eval.classifier_config = "configs/default.py"
  config.eval.classifier_workdir = ""  # "": <workdir>/digits_classifier
  config.eval.num_samples = 50_000
  config.eval.real_split = "train"
  config.eval.num_real = 0  # 0: the whole split
  config.eval.num_kid_real = 10_000
  config.eval.kid_subsets = 100
  config.eval.kid_subset_size = 1000
  config.eval.batch_size = 250
  config.eval.seed = 1234
  config.eval.stats_dir = ""  # "": <TFDS data_dir>/gan_statistics
  config.eval.grid_rows = 8
  config.eval.grid_classes = 10

  config.log_every_steps = 100
  config.eval_every_steps = 10_000
  config.checkpoint_every_steps = 5_000
  return config


def detection() -> ml_collections.ConfigDict:
  """Object detection with RetinaNet (train/tasks/detection.py, data/detection.py)."""
  config = _training("detection")
  d = config.dataset
  d.image_size = 640
  d.scale_range = (0.8, 1.2)  # scale jitter of the longer side
  d.flip = True
  d.max_boxes = 100  # training boxes per image
  d.eval_max_boxes = 100
  d.min_box_size = 1.0  # pixels; smaller crop remnants are dropped

  m = config.model
  m.name = "retinanet"
  m.min_level, m.max_level = 3, 7  # FPN levels
  m.padding = "auto"  # "auto": "torch" when init_from is a torch .pth, else "same"

  config.anchors = ml_collections.ConfigDict()
  config.anchors.anchor_scale = 4.0
  config.anchors.scales_per_octave = 3
  config.anchors.aspect_ratios = (0.5, 1.0, 2.0)

  config.loss = ml_collections.ConfigDict()
  config.loss.alpha = 0.25  # focal loss
  config.loss.gamma = 2.0
  config.loss.box_weight = 1.0
  config.loss.smooth_l1_beta = 0.11
  config.loss.positive_iou = 0.5
  config.loss.negative_iou = 0.4

  config.eval = ml_collections.ConfigDict()
  config.eval.pre_nms_top_k = 1000  # per level
  config.eval.score_threshold = 0.05
  config.eval.iou_threshold = 0.5
  config.eval.max_detections = 100
  config.eval.max_batches = 0  # 0: the whole eval split
  config.num_summary_images = 4
  config.summary_score_threshold = 0.3  # boxes drawn on the summary images
  config.optimizer = optimizer()
  return config
