import {addons} from '@storybook/addons';
import argo from './Argo';

addons.setConfig({
    theme: argo,
});
