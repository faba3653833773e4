"""Metrics that are more than an average: mIoU from a confusion matrix, PSNR / SSIM /
NRMSE, Inception features with FID / IS / KID, COCO mAP (through pycocotools)."""
